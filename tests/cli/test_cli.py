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
