"""Any integer is a seed on every command: negative ones and those beyond 64 bits are folded
into numpy's seed space (seed mod 2**128), the same way everywhere."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from spec_decode.certify.audit import audit
from spec_decode.certify.grid import audit_cases
from spec_decode.cli.app import app
from spec_decode.core.randomness import SEED_SPACE, fold_seed

runner = CliRunner()

COMMANDS = {
    "run": ["run", "--tokens", "50"],
    "verify": ["verify", "--pairs", "50"],
    "sweep": ["sweep", "--k", "1", "--tokens", "20"],
    "audit": ["audit", "--case", "0"],
}


def payload(args: list[str], seed: int) -> dict:
    result = runner.invoke(app, [*args, "--seed", str(seed), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.parametrize("command", ["run", "sweep", "audit"])
@pytest.mark.parametrize("seed", [-1, 2**70])
def test_every_command_takes_any_integer_seed(command, seed):
    first = payload(COMMANDS[command], seed)
    assert first == payload(COMMANDS[command], seed)  # same seed, same output
    if command == "audit":
        assert first["verdict"] == "PASS"  # a seed never blames the rule


@pytest.mark.slow
@pytest.mark.parametrize("seed", [-1, 2**70])
def test_verify_takes_any_integer_seed(seed):
    assert payload(COMMANDS["verify"], seed)["pass"] is True


def test_negative_seeds_fold_modulo_2_to_the_128():
    assert fold_seed(-1) == SEED_SPACE - 1
    assert fold_seed(2**128 + 5) == 5
    assert fold_seed(2**70) == 2**70  # seeds numpy accepts are unchanged
    run = COMMANDS["run"]
    assert payload(run, -1) == payload(run, SEED_SPACE - 1)
    assert payload(run, -1) != payload(run, 0)
    with pytest.raises(ValueError, match="integer"):
        fold_seed(1.5)


def test_the_library_audit_takes_a_negative_seed():
    assert audit(cases=audit_cases(seed=-1)[:2]).verdict == "PASS"
    assert audit_cases(seed=-1) == audit_cases(seed=SEED_SPACE - 1)
