"""The coupled rule's closed forms: the race's P(x = y = i) against the O(V^2) sum and a seeded
binomial test of the sampler itself, its lower bound (1 - TV) / (1 + TV), the inverse CDF's
against enumeration, and the long run on a Markov pair against a measured run."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from spec_decode import SamplingParams
from spec_decode.certify.enumeration import enumerate_outputs
from spec_decode.core.noise import SeededNoise
from spec_decode.core.samplers import NOISE_BLOCK, UniformNoise
from spec_decode.theory.coupled import (
    coupled_markov_expectation,
    coupling_match,
    inverse_cdf_match,
    race_match,
)
from spec_decode.toy.experiments import ToySetup, run_experiment

SIGNIFICANCE = 1e-3


def pairs(vocab: int, n: int, seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        p, q = rng.dirichlet(np.full(vocab, 0.4), size=2)
        p[rng.random(vocab) < 0.2] = 0.0  # zeros in either row
        q[rng.random(vocab) < 0.2] = 0.0
        p[0] += 0.01
        q[0] += 0.01
        yield p / p.sum(), q / q.sum()


def test_race_match_equals_the_quadratic_sum_and_beats_its_lower_bound():
    for p, q in pairs(12, 50, seed=1):
        brute = np.zeros_like(p)
        for i in np.flatnonzero((p > 0) & (q > 0)):
            with np.errstate(divide="ignore", invalid="ignore"):
                brute[i] = 1 / np.nansum(np.maximum(p / p[i], q / q[i]))
        assert np.allclose(race_match(p, q), brute, atol=1e-14)
        tv = 0.5 * np.abs(p - q).sum()
        assert race_match(p, q).sum() >= (1 - tv) / (1 + tv) - 1e-12


def test_one_hot_drafts_are_accepted_with_probability_p_of_x():
    p = next(pairs(10, 1, seed=2))[0]
    for x in np.flatnonzero(p > 0):
        one_hot = np.eye(10)[x]
        for sampler in ("race", "flat-race", "inverse-cdf"):
            assert coupling_match(p, one_hot, sampler).sum() == pytest.approx(p[x], abs=1e-14)


def test_the_inverse_cdf_match_is_the_enumerated_one():
    for p, q in pairs(6, 10, seed=3):

        def agree(source, p=p, q=q):
            noise = UniformNoise(source.uniform())
            return [int(noise.choose(q) == noise.choose(p))]

        exact = enumerate_outputs(agree).distribution.get((1,), 0.0)
        assert exact == pytest.approx(inverse_cdf_match(p, q).sum(), abs=1e-12)


@pytest.mark.parametrize("sampler, vocab", [("race", 3 * NOISE_BLOCK + 50), ("flat-race", 40)])
def test_the_seeded_races_agree_as_often_as_the_closed_form_says(sampler, vocab):
    """Binomial test at SIGNIFICANCE of the frequency of x == y over positions of one seed."""
    rng = np.random.default_rng(4)
    p = rng.dirichlet(np.full(vocab, 0.05))
    q = 0.6 * p + 0.4 * rng.dirichlet(np.full(vocab, 0.05))
    noise = SeededNoise(np.random.SeedSequence(9), sampler)
    draws = 2000
    agreed = sum(noise.noise(t).choose(p) == noise.noise(t).choose(q) for t in range(draws))
    expected = coupling_match(p, q, sampler).sum()
    assert stats.binomtest(agreed, draws, expected).pvalue > SIGNIFICANCE


@pytest.mark.parametrize(
    "sampling",
    [SamplingParams(), pytest.param(SamplingParams(0.7, top_k=5), marks=pytest.mark.slow)],
)
def test_a_coupled_run_matches_its_exact_long_run(sampling):
    setup = ToySetup(vocab_size=16, seed=3)
    result = run_experiment(setup, 0.7, 3, 1500, 0.1, seed=5, sampling=sampling, rule="coupled")
    target, draft = setup.models(0.7)
    expectation = coupled_markov_expectation(target, draft, 3, sampling)
    assert result.expected_tokens_per_pass == pytest.approx(expectation.tokens_per_pass)
    assert result.rule == "coupled"
    # a step emits 1..k+1 tokens (standard deviation <= k/2); normal approximation of the mean
    # over the run's steps, two-sided at SIGNIFICANCE
    tolerance = stats.norm.isf(SIGNIFICANCE / 2) * (3 / 2) / np.sqrt(result.target_passes)
    assert abs(result.tokens_per_pass - expectation.tokens_per_pass) < tolerance
