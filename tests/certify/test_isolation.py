"""The isolated audit: code under test that exits, interrupts, hangs, dies or prints cannot end,
outlast or corrupt the audit; it gets a FAIL or an ERROR naming the case, never exit 0."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from spec_decode.certify import zoo
from spec_decode.certify.audit import audit
from spec_decode.certify.grid import audit_cases
from spec_decode.cli.app import app

runner = CliRunner()

MISBEHAVING = """
import os
import time

from spec_decode.core.rules import exact_rule


def exits(p, q, d, rng):
    raise SystemExit(0)


def interrupts(p, q, d, rng):
    raise KeyboardInterrupt


def hangs(p, q, d, rng):
    while True:
        time.sleep(0.1)


def dies(p, q, d, rng):
    os._exit(0)


def drafter_exits(model, prefix, k, rng):
    raise SystemExit(1)


def prints(p, q, d, rng):
    print("noise on standard output")
    return exact_rule(p, q, d, rng)
"""

FIRST_CASE = "peaked, V=2, k=1, plain"


@pytest.fixture
def rules(tmp_path, monkeypatch):
    """A module of misbehaving rules in the current directory, where the audit imports from."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "misbehaving.py").write_text(MISBEHAVING)


def audit_json(*args: str) -> tuple[int, dict]:
    result = runner.invoke(app, ["audit", *args, "--json"])
    return result.exit_code, json.loads(result.stdout)


@pytest.mark.parametrize(
    ("rule", "raised"),
    [("exits", "SystemExit: 0"), ("interrupts", "KeyboardInterrupt")],
)
def test_a_rule_that_exits_or_interrupts_fails_with_the_case_named(rules, rule, raised):
    code, report = audit_json(f"misbehaving:{rule}", "--case", "0")
    assert code == 1
    assert report["verdict"] == "FAIL" and report["pass"] is False
    assert raised in report["problem"] and f"case: {FIRST_CASE}" in report["problem"]
    assert f"in {rule}" in report["problem"]


def test_a_drafter_that_exits_fails_too(rules):
    code, report = audit_json("--drafter", "misbehaving:drafter_exits", "--case", "0")
    assert code == 1
    assert report["verdict"] == "FAIL" and "SystemExit: 1" in report["problem"]


@pytest.mark.slow
def test_a_rule_that_never_returns_is_stopped_past_the_case_limit(rules):
    code, report = audit_json("misbehaving:hangs", "--case", "0", "--case-timeout", "1")
    assert code == 1
    assert report["verdict"] == "ERROR"
    assert f"case '{FIRST_CASE}'" in report["problem"] and "--case-timeout" in report["problem"]


@pytest.mark.slow
def test_a_rule_that_never_returns_is_stopped_past_the_overall_limit(rules):
    code, report = audit_json("misbehaving:hangs", "--timeout", "2")
    assert code == 1
    assert report["verdict"] == "ERROR" and "--timeout" in report["problem"]


def test_a_rule_that_ends_its_process_is_an_error_not_a_pass(rules):
    code, report = audit_json("misbehaving:dies", "--case", "0")
    assert code == 1
    assert report["verdict"] == "ERROR"
    assert "exit status 0" in report["problem"] and FIRST_CASE in report["problem"]


def test_what_the_code_prints_cannot_corrupt_the_json(rules):
    code, report = audit_json("misbehaving:prints", "--case", "0")
    assert code == 0 and report["verdict"] == "PASS"


def test_text_output_names_the_stopped_case(rules):
    result = runner.invoke(app, ["audit", "misbehaving:dies", "--case", "0"])
    assert result.exit_code == 1
    assert "ERROR" in result.output and FIRST_CASE in " ".join(result.output.split())


def test_unusable_input_is_still_exit_2(rules):
    unknown = runner.invoke(app, ["audit", "misbehaving:exits", "--case", "no such case"])
    assert unknown.exit_code == 2 and "no case matches" in unknown.output
    drafter = runner.invoke(app, ["audit", "--drafter", "misbehaving:nothing"])
    assert drafter.exit_code == 2 and "has no attribute 'nothing'" in drafter.output
    timeout = runner.invoke(app, ["audit", "--timeout", "0"])
    assert timeout.exit_code == 2 and "--timeout" in timeout.output


def test_the_zoo_runs_isolated_in_one_child(monkeypatch):
    from spec_decode.cli import audit as audit_command

    some = {"exact_rule", "swapped_residual", "one_hot_drafter"}
    entries = [entry for entry in audit_command._zoo_entries() if entry[0] in some]
    monkeypatch.setattr(audit_command, "_zoo_entries", lambda: entries)
    result = runner.invoke(app, ["audit", "--zoo", "--case", "0", "--json"])
    payload = json.loads(result.stdout)
    assert result.exit_code == 0, payload
    assert {name: entry["verdict"] for name, entry in payload.items()} == {
        "exact_rule": "PASS",
        "swapped_residual": "FAIL",
        "one_hot_drafter": "PASS",
    }


@pytest.mark.slow
def test_the_library_isolates_on_request_with_the_same_report():
    cases = audit_cases()[:3]
    for rule in (zoo.exact_rule, zoo.swapped_residual):
        isolated = audit(rule=rule, cases=cases, isolate=True, timeout=600)
        assert isolated == audit(rule=rule, cases=cases)
    with pytest.raises(ValueError, match="picklable"):
        audit(rule=lambda p, q, d, rng: [0], cases=cases, isolate=True)
    with pytest.raises(ValueError, match="isolate=True"):
        audit(cases=cases, timeout=5)


def test_in_process_a_system_exit_is_a_fail_too():
    def exits(p, q, d, rng):
        raise SystemExit(3)

    report = audit(rule=exits, cases=audit_cases()[:1])
    assert report.verdict == "FAIL" and "SystemExit: 3" in report.problem


def test_infinite_limits_mean_no_limit():
    code, report = audit_json("--case", "0", "--timeout", "inf", "--case-timeout", "inf")
    assert code == 0 and report["verdict"] == "PASS"
