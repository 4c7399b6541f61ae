"""Seeded chi-square tests of the real generator against target-only sampling.

Significance 1e-3 per test; the sample size comes from ``samples_for_power`` so that each test
detects any total-variation distance >= 0.02 (over its cells) with probability >= 0.99. Each test
is also run with the 'resample from p' bug and must FAIL.
"""

from __future__ import annotations

import pytest

from spec_decode import SamplingParams
from spec_decode.certify.generators import chain_generator
from spec_decode.certify.goodness_of_fit import samples_for_power
from spec_decode.certify.statistical import statistical_certificate
from spec_decode.certify.zoo.rules import resample_from_target

SIGNIFICANCE = 1e-3
DETECTABLE_TV = 0.02
K = 2
RUNS = samples_for_power(cells=4 * 4, tv=DETECTABLE_TV, significance=SIGNIFICANCE, power=0.99)

SETTINGS = {
    "plain": SamplingParams(),
    "warped (temperature 0.8, top-k 3)": SamplingParams(temperature=0.8, top_k=3),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", SETTINGS)
def test_exact_rule_matches_target_sampling(small_pair, name):
    target, draft = small_pair
    sampling = SETTINGS[name]
    generate = chain_generator(target, draft, [0], K, sampling=sampling)
    certificate = statistical_certificate(
        generate, target, [0], K, RUNS, seed=11, sampling=sampling, significance=SIGNIFICANCE
    )
    assert certificate.passed, certificate.tests
    assert all(tv <= DETECTABLE_TV + 1e-9 for tv in certificate.detectable_tv.values())


@pytest.mark.slow
@pytest.mark.parametrize("name", SETTINGS)
def test_each_test_fails_when_rejection_resamples_from_p(small_pair, name):
    target, draft = small_pair
    sampling = SETTINGS[name]
    generate = chain_generator(target, draft, [0], K, sampling=sampling, rule=resample_from_target)
    certificate = statistical_certificate(
        generate, target, [0], K, RUNS, seed=11, sampling=sampling, significance=SIGNIFICANCE
    )
    assert all(test.rejected for test in certificate.tests.values()), certificate.tests
