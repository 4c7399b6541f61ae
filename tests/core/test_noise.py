"""Positional noise: a position's noise depends on (seed, position) alone, target-only decoding
with it is a function of the seed, and each sampler is a draw from p (inverse CDF enumerated
exactly; the race by a seeded chi-square test of stated power). Broken samplers FAIL."""

from __future__ import annotations

import numpy as np
import pytest

from spec_decode import SamplingParams, random_markov
from spec_decode.certify.exhaustive import exact_distribution
from spec_decode.certify.goodness_of_fit import samples_for_power
from spec_decode.certify.positional import exact_sampler_distribution, sampler_certificate
from spec_decode.certify.reference import TV_TOLERANCE
from spec_decode.certify.statistical import POWER
from spec_decode.certify.zoo.positional import (
    BlocksByLargestEntry,
    RaceByProduct,
    StepRelativeNoise,
)
from spec_decode.core.generate import generate_autoregressive
from spec_decode.core.noise import SAMPLERS, SeededNoise, StreamNoise, positional_source
from spec_decode.core.samplers import NOISE_BLOCK, RaceNoise

SIGNIFICANCE = 1e-3


def sparse_row(vocab: int, support: int, seed: int) -> np.ndarray:
    """A row over ``vocab`` entries with ``support`` positive ones spread over every block."""
    rng = np.random.default_rng(seed)
    row = np.zeros(vocab)
    row[rng.choice(vocab, support, replace=False)] = rng.dirichlet(np.full(support, 0.5))
    return row


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_the_noise_of_a_position_does_not_depend_on_how_steps_are_cut(sampler):
    row = sparse_row(3 * NOISE_BLOCK + 5, 60, seed=1)
    for position in (0, 7, 1000):
        choices = set()
        for start in (0, position, max(position - 3, 0)):
            fresh = SeededNoise(np.random.SeedSequence(11), sampler)  # nothing cached
            noise = fresh.at(start).noise(position - start)
            choices.add((noise.choose(row), tuple(noise.ranked(row, 3))))
        assert len(choices) == 1


def test_ranked_tokens_are_distinct_and_led_by_the_choice():
    row = sparse_row(2 * NOISE_BLOCK, 40, seed=2)
    for sampler in SAMPLERS:
        noise = SeededNoise(np.random.SeedSequence(3), sampler).noise(5)
        ranked = noise.ranked(row, 6)
        assert ranked[0] == noise.choose(row) and len(set(ranked)) == 6
        assert all(row[t] > 0 for t in ranked)
    assert len(SeededNoise(np.random.SeedSequence(3)).noise(0).ranked(np.eye(4)[1], 3)) == 1


def test_target_only_decoding_is_a_function_of_the_seed():
    target = random_markov(8, seed=1)

    def run(rng):
        source = positional_source(rng)
        return generate_autoregressive(target, [0], 40, source, sampling=SamplingParams(0.9)).tokens

    assert run(4) == run(4) != run(5)
    assert run(-1) == run(2**128 - 1)  # seeds are folded, as everywhere
    assert run(np.random.default_rng(4)) == run(np.random.default_rng(4))  # one draw as the seed
    reused = np.random.default_rng(4)
    assert run(reused) != run(reused)  # a generator reused across runs gives each its own noise


@pytest.mark.parametrize("vocab, support", [(5, 5), (3 * NOISE_BLOCK + 17, 50)])
def test_the_inverse_cdf_sampler_is_exact_by_enumeration(vocab, support):
    comparison = exact_sampler_distribution(sparse_row(vocab, support, seed=vocab))
    assert comparison.paths >= support  # rounding at a block's end can split one path in two
    assert comparison.tv < TV_TOLERANCE


@pytest.mark.parametrize(
    "sampling", [SamplingParams(), SamplingParams(0.5, top_k=2), SamplingParams(0.0)]
)
def test_target_only_decoding_with_inverse_cdf_noise_is_exact_by_enumeration(sampling):
    target = random_markov(3, seed=4, order=2)

    def run(source, n):
        noise = positional_source(source)
        return generate_autoregressive(target, [0, 1], n, noise, sampling=sampling).tokens

    assert isinstance(positional_source(StreamNoise(None)), StreamNoise)  # kept as it is
    assert exact_distribution(run, target, [0, 1], 4, sampling).tv < TV_TOLERANCE


def test_step_relative_noise_fails_the_enumeration():
    """Every step of target-only decoding starts at offset 0: one uniform for all tokens."""
    target = random_markov(3, seed=4)

    def run(source, n):
        noise = StepRelativeNoise(positional_source(source))
        return generate_autoregressive(target, [0], n, noise).tokens

    assert exact_distribution(run, target, [0], 3).tv > 0.05


def race_row() -> np.ndarray:
    """30 entries of positive mass over three blocks and a short one: many small entries in the
    first block, one large entry alone in the second (a block's mass is not its largest entry)."""
    row = np.zeros(3 * NOISE_BLOCK + 100)
    row[np.arange(0, 1000, 50)] = 0.015  # 20 entries, 0.3 in all
    row[NOISE_BLOCK + 7] = 0.3
    row[2 * NOISE_BLOCK + np.arange(5)] = 0.04
    row[3 * NOISE_BLOCK + np.array([3, 30, 60, 99])] = [0.1, 0.05, 0.03, 0.02]
    return row


RACE_ROW = race_row()
#: The smallest TV the fast race test detects with probability POWER (the slow one: SLOW_TV).
RACE_TV, SLOW_TV = 0.1, 0.03


def race_draws(tv: float = RACE_TV) -> int:
    return samples_for_power(int((RACE_ROW > 0).sum()), tv, SIGNIFICANCE, POWER)


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_the_seeded_samplers_pass_the_statistical_test(sampler):
    noise = SeededNoise(np.random.SeedSequence(2026), sampler)
    certificate = sampler_certificate(noise.noise, RACE_ROW, race_draws())
    assert certificate.passed, certificate.tests
    assert max(certificate.detectable_tv.values()) <= RACE_TV


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["race", "flat-race"])
def test_the_races_pass_a_test_that_detects_tv_003(sampler):
    noise = SeededNoise(np.random.SeedSequence(7), sampler)
    certificate = sampler_certificate(noise.noise, RACE_ROW, race_draws(SLOW_TV))
    assert certificate.passed, certificate.tests


@pytest.mark.parametrize("broken", [RaceByProduct, BlocksByLargestEntry])
def test_broken_races_fail_the_statistical_test(broken):
    key = SeededNoise(np.random.SeedSequence(2026)).key_words
    certificate = sampler_certificate(lambda t: broken(key, t), RACE_ROW, race_draws())
    assert not certificate.passed
    assert isinstance(broken(key, 0), RaceNoise)
