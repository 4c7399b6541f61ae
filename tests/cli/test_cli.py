"""The command line: JSON keys, exit codes, and clear errors for bad arguments."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from spec_decode.cli.app import app

runner = CliRunner()


def invoke_json(*args: str) -> dict:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.slow
def test_verify_passes():
    payload = invoke_json("verify", "--pairs", "2000")
    assert payload["pass"] is True
    assert payload["pairs"] == 2000
    assert payload["max_tv"] < 1e-12
    text = runner.invoke(app, ["verify", "--pairs", "500"])
    assert text.exit_code == 0 and "PASS" in text.output


def test_run_perfect_draft_gives_k_plus_one():
    payload = invoke_json("run", "--agreement", "1.0", "--k", "4", "--tokens", "5000")
    assert payload["tokens_per_pass"] == 5.0
    for key in (
        "tokens",
        "k",
        "agreement",
        "target_passes",
        "draft_calls",
        "acceptance_rate",
        "tokens_per_pass",
        "expected_tokens_per_pass",
        "speedup",
        "draft_cost",
    ):
        assert key in payload


def test_run_text_shows_measured_and_expected():
    result = runner.invoke(app, ["run", "--tokens", "300"])
    assert result.exit_code == 0
    assert "tokens / target pass" in result.output and "expected" in result.output


@pytest.mark.slow
def test_sweep_rows(tmp_path):
    pytest.importorskip("matplotlib")
    plot = tmp_path / "sweep.png"
    payload = invoke_json("sweep", "--k", "2", "--tokens", "200", "--plot", str(plot))
    assert len(payload["rows"]) == 2 * 9
    for row in payload["rows"]:
        assert {"alpha", "k", "tokens_per_pass", "expected_tokens_per_pass", "speedup"} <= set(row)
    assert plot.stat().st_size > 0


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["run", "--k", "0"], "--k"),
        (["run", "--agreement", "1.5"], "--agreement"),
        (["run", "--tokens", "0"], "--tokens"),
        (["run", "--vocab", "1"], "--vocab"),
        (["sweep", "--k", "0"], "--k"),
        (["verify", "--pairs", "0"], "--pairs"),
    ],
)
def test_bad_arguments_exit_with_a_clear_message(args, hint):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert hint in result.output


@pytest.mark.parametrize(
    ("source", "spec", "message"),
    [
        (None, "..foo:bar", "relative import"),
        ("def f(:\n", "broken:f", "syntax error"),
        ("raise RuntimeError('nope')\n", "broken:f", "RuntimeError: nope"),
        ("x = 1\n", "broken:f", "has no attribute 'f'"),
        (None, "nocolon", "expected module:attribute"),
    ],
    ids=["relative", "syntax error", "raises on import", "no attribute", "no colon"],
)
def test_audit_of_unusable_code_exits_2_with_a_message(
    tmp_path, monkeypatch, source, spec, message
):
    monkeypatch.chdir(tmp_path)
    if source is not None:
        (tmp_path / "broken.py").write_text(source)
    result = runner.invoke(app, ["audit", spec])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())


@pytest.mark.slow
def test_audit_imports_from_the_current_directory_and_picks_cases(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_rules_for_the_audit.py").write_text(
        "from spec_decode.certify.zoo import exact_up_to_three\n"
        "long_block_rule_with_a_long_name = exact_up_to_three\n"
    )
    spec = "my_rules_for_the_audit:long_block_rule_with_a_long_name"
    result = runner.invoke(app, ["audit", spec, "--case", "k=8", "--case", "k=4, plain"])
    assert result.exit_code == 1, result.output
    assert spec in result.output  # the table does not cut the name
    assert "deterministic draft, V=2, k=8, plain" in result.output  # progress per case
    assert runner.invoke(app, ["audit", spec, "--case", "k=3"]).exit_code == 0
    unknown = runner.invoke(app, ["audit", spec, "--case", "no such case"])
    assert unknown.exit_code == 2 and "no case matches" in unknown.output


@pytest.mark.slow
def test_audit_tolerance_separates_rounding_from_bias():
    args = ["audit", "zoo:float32_rule", "--case", "k=8", "--json"]
    strict = runner.invoke(app, args)
    assert strict.exit_code == 1
    payload = json.loads(strict.output)
    assert 1e-9 < payload["exhaustive_tv"] < 1e-6 and payload["rounding_tv"] > 1e-9
    assert runner.invoke(app, [*args, "--tolerance", "1e-6"]).exit_code == 0


@pytest.mark.parametrize(
    ("args", "limit"),
    [
        (["--k", "100000", "--tokens", "10"], "limit of 1024"),
        (["--k", "1000000000000"], "limit of 1024"),
        (["--vocab", "200000"], "limit of 16,777,216"),
        (["--tree", "1000"], "width 32"),
        (["--tree", "8,8,8,8"], "1024 nodes"),
    ],
)
def test_run_refuses_absurd_sizes_up_front(args, limit):
    result = runner.invoke(app, ["run", *args])
    assert result.exit_code == 2
    assert limit in " ".join(result.output.split())
