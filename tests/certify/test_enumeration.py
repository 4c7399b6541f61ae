"""The enumeration checks itself (replay determinism, total probability 1) and enumerates
uniform draws that are only compared with thresholds exactly."""

from __future__ import annotations

import numpy as np
import pytest

from spec_decode.certify.enumeration import (
    EnumerationBudgetExceeded,
    EnumerationError,
    NotEnumerable,
    enumerate_outputs,
)


class CachedModel:
    """A stateful 'model' whose row depends on how many calls its cache has seen, like a KV cache
    that survives from one path to the next; ``reset`` clears it."""

    def __init__(self) -> None:
        self.calls = 0

    def reset(self) -> None:
        self.calls = 0

    def row(self) -> np.ndarray:
        self.calls += 1
        drift = 1e-3 * (self.calls - 1)
        return np.array([0.5 + drift, 0.5 - drift])


def _two_draws(model: CachedModel):
    return lambda source: [source.categorical(model.row()), source.categorical(model.row())]


def test_a_stateful_program_without_reset_fails_the_replay_check():
    with pytest.raises(EnumerationError, match="replay is not deterministic"):
        enumerate_outputs(_two_draws(CachedModel()))


def test_the_same_program_with_reset_enumerates_exactly():
    model = CachedModel()
    result = enumerate_outputs(_two_draws(model), reset=model.reset)
    assert result.paths == 4
    assert result.distribution[(0, 0)] == pytest.approx(0.5 * 0.501, abs=1e-15)
    assert abs(result.total_probability - 1) < 1e-12


def test_a_program_that_ends_early_on_replay_fails():
    calls = iter(range(100))

    def program(source):
        first = source.bernoulli(0.5)
        return [int(first), int(source.bernoulli(0.5))] if next(calls) == 0 else [int(first)]

    with pytest.raises(EnumerationError, match="stopped after"):
        enumerate_outputs(program)


def test_a_program_whose_probabilities_do_not_sum_to_one_fails():
    """Replays match (no choice is replayed) but the weights are read from shifting state."""
    weights = iter([0.5, 0.6])

    def program(source):
        return [int(source.bernoulli(next(weights)))]

    # The second path replays point 0 with other options: caught by the replay check.
    with pytest.raises(EnumerationError):
        enumerate_outputs(program)


def test_total_probability_check_catches_lost_mass():
    def program(source):
        source.probability *= 0.999  # a program that loses mass on every path
        return [int(source.bernoulli(0.5))]

    with pytest.raises(EnumerationError, match=r"sum to 0\.999"):
        enumerate_outputs(program)


def test_path_budget_is_enforced():
    with pytest.raises(EnumerationBudgetExceeded, match="more than 3"):
        enumerate_outputs(lambda s: [s.categorical(np.ones(5))], max_paths=3)


def test_uniform_compared_with_thresholds_is_enumerated_exactly():
    def program(source):
        u = source.uniform()
        return [u < 0.3, 2 * u + 0.1 >= 0.5, np.float64(0.9) > 1 - u, u / 2 > 0.1]

    result = enumerate_outputs(program)
    assert result.distribution == pytest.approx(
        {(1, 0, 0, 0): 0.1, (1, 0, 1, 0): 0.1, (1, 1, 1, 1): 0.1, (0, 1, 1, 1): 0.7}
    )


def test_reusing_one_uniform_keeps_its_interval_consistent():
    def program(source):
        u = source.uniform()
        return [int(u < 0.5), int(u < 0.25), int(u < 0.75)]

    result = enumerate_outputs(program)
    assert result.distribution == pytest.approx(
        {(1, 1, 1): 0.25, (1, 0, 1): 0.25, (0, 0, 1): 0.25, (0, 0, 0): 0.25}
    )


@pytest.mark.parametrize(
    ("use", "operation"),
    [
        (lambda u: float(u), "float"),
        (lambda u: np.searchsorted(np.array([0.3, 0.6]), u), "numpy"),
        (lambda u: [0, 1][u], "indexing"),
        (lambda u: u < np.array([0.2, 0.4]), "non-scalar"),
        (lambda u: np.log(u), "non-scalar|numpy"),
    ],
)
def test_other_uses_of_a_uniform_are_not_enumerable(use, operation):
    with pytest.raises((NotEnumerable, TypeError), match=operation):
        enumerate_outputs(lambda source: [int(np.all(use(source.uniform())))])
