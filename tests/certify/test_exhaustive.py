"""Exhaustive certificate: the real generator's exact output distribution is the target's."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from spec_decode import SamplingParams, draft_from_target, random_markov
from spec_decode.certify.enumeration import EnumeratingSource, NotEnumerable, enumerate_outputs
from spec_decode.certify.exhaustive import exact_output_distribution
from spec_decode.certify.zoo.rules import resample_from_target

TOLERANCE = 1e-12
CONTROLS = {
    "plain": SamplingParams(),
    "temperature 0.7, top-k 2": SamplingParams(temperature=0.7, top_k=2),
    "top-p 0.8": SamplingParams(top_p=0.8),
    "greedy": SamplingParams(temperature=0),
}


def pair(vocab: int, order: int, agreement: float = 0.5):
    target = random_markov(vocab, seed=vocab + 10 * order, order=order)
    return target, draft_from_target(target, agreement, seed=99)


GRID = [
    (vocab, k, order, control)
    for vocab, k, order in itertools.product((2, 3, 4), (1, 2, 3), (1, 2))
    for control in CONTROLS
]


@pytest.mark.slow
@pytest.mark.parametrize(("vocab", "k", "order", "control"), GRID)
def test_generator_is_exact_over_three_tokens(vocab, k, order, control):
    target, draft = pair(vocab, order)
    result = exact_output_distribution(target, draft, [0] * order, 3, k, sampling=CONTROLS[control])
    assert abs(result.total_probability - 1) < TOLERANCE
    assert result.tv < TOLERANCE


@pytest.mark.slow
@pytest.mark.parametrize(("vocab", "k", "order"), [(2, 3, 1), (3, 3, 1), (4, 2, 1), (3, 2, 2)])
def test_generator_is_exact_over_four_tokens(vocab, k, order):
    target, draft = pair(vocab, order)
    result = exact_output_distribution(target, draft, [0] * order, 4, k)
    assert abs(result.total_probability - 1) < TOLERANCE
    assert result.tv < TOLERANCE


@pytest.mark.parametrize("control", CONTROLS)
def test_certificate_fails_for_the_resample_from_p_bug(control):
    target, draft = pair(3, 1)
    result = exact_output_distribution(
        target, draft, [0], 3, 2, sampling=CONTROLS[control], rule=resample_from_target
    )
    if control == "greedy":  # one-hot p and q: resampling p IS the residual, the bug is invisible
        assert result.tv < TOLERANCE
    else:
        assert result.tv > 1e-3


def test_enumerator_visits_every_path_with_its_probability():
    def program(source):
        first = source.categorical(np.array([0.5, 0.25, 0.25]))
        second = source.bernoulli(0.3) if first == 0 else source.bernoulli(1.0)
        return [first, int(second)]

    result = enumerate_outputs(program)
    assert result.paths == 4  # bernoulli(1.0) has one branch
    assert result.distribution == pytest.approx(
        {(0, 1): 0.15, (0, 0): 0.35, (1, 1): 0.25, (2, 1): 0.25}
    )
    assert abs(result.total_probability - 1) < TOLERANCE


def test_uniform_used_other_than_by_comparison_cannot_be_enumerated():
    with pytest.raises(NotEnumerable, match="float"):
        enumerate_outputs(lambda source: [int(float(source.uniform()) < 0.5)])


def test_zero_probability_branches_are_pruned():
    source = EnumeratingSource([])
    assert source.categorical(np.array([0.0, 1.0, 0.0])) == 1
    assert source.widths == [1]
