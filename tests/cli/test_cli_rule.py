"""``run --rule`` and ``sweep --rule``: the coupled rule beside its exact theory, and clear
errors for an unknown rule."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from spec_decode.cli.app import app

runner = CliRunner()


def test_run_with_the_coupled_rule_reports_it_beside_its_theory():
    result = runner.invoke(app, ["run", "--rule", "coupled", "--tokens", "400", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["rule"] == "coupled"
    assert 0 < payload["expected_acceptance_rate"] < 1
    assert payload["tokens_per_pass"] > 1
    text = runner.invoke(app, ["run", "--rule", "coupled", "--tokens", "200"])
    assert text.exit_code == 0 and "coupled rule" in text.output


def test_a_perfect_draft_is_always_accepted_under_the_coupled_rule():
    args = ["run", "--rule", "coupled", "--agreement", "1", "--k", "3", "--tokens", "400"]
    payload = json.loads(runner.invoke(app, [*args, "--json"]).output)
    assert payload["tokens_per_pass"] == 4.0
    assert abs(payload["expected_tokens_per_pass"] - 4.0) < 1e-12


def test_sweep_takes_the_rule():
    args = ["sweep", "--rule", "coupled", "--k", "1", "--tokens", "50", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["rule"] == "coupled"
    assert {row["rule"] for row in payload["rows"]} == {"coupled"}


def test_the_coupled_sweep_plots_beside_the_standard_rule(tmp_path):
    pytest.importorskip("matplotlib")
    plot = tmp_path / "sweep.png"
    args = ["sweep", "--rule", "coupled", "--k", "2", "--tokens", "50", "--plot", str(plot)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert plot.stat().st_size > 10_000


def test_an_unknown_rule_is_refused():
    for command in ("run", "sweep"):
        result = runner.invoke(app, [command, "--rule", "typical"])
        assert result.exit_code == 2 and "--rule" in result.output
