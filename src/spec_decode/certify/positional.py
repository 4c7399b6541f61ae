"""Certificates of a positional sampler itself: S(p, xi_t) over positions t is a draw from p.

* :func:`exact_sampler_distribution` enumerates the inverse-CDF sampler on a lazily resolved
  uniform (:mod:`spec_decode.certify.lazy_uniform`): the exact probability of every token.
* :func:`sampler_certificate` is the seeded chi-square test for samplers that cannot be enumerated
  (the race, whose exponentials are not compared with thresholds): one draw per position of one
  seed, so it also tests that the noise of different positions is independent of the row.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from spec_decode.certify.enumeration import enumerate_outputs
from spec_decode.certify.goodness_of_fit import chi_square_test, detectable_tv
from spec_decode.certify.reference import ExactComparison
from spec_decode.certify.statistical import POWER, StatisticalCertificate
from spec_decode.core.samplers import PositionNoise, UniformNoise

#: The noise of absolute position t.
NoiseAt = Callable[[int], PositionNoise]


def exact_sampler_distribution(
    probs: np.ndarray, noise: Callable[[object], PositionNoise] = UniformNoise
) -> ExactComparison:
    """The exact distribution of ``noise(u).choose(probs)`` over a uniform u, by enumeration,
    beside ``probs`` normalised."""
    probs = np.asarray(probs, dtype=np.float64)
    enumeration = enumerate_outputs(lambda source: [noise(source.uniform()).choose(probs)])
    exact = np.zeros(probs.size)
    for (token,), prob in enumeration.distribution.items():
        exact[token] += prob
    return ExactComparison(exact, probs / probs.sum(), enumeration.paths)


def sampler_certificate(
    noise_at: NoiseAt, probs: np.ndarray, draws: int, *, significance: float = 1e-3
) -> StatisticalCertificate:
    """Chi-square test of ``noise_at(t).choose(probs)`` for t = 0..draws-1 against ``probs``,
    with the smallest TV it detects with probability :data:`POWER`."""
    probs = np.asarray(probs, dtype=np.float64)
    reference = probs / probs.sum()
    counts = np.bincount(
        [noise_at(t).choose(probs) for t in range(draws)], minlength=probs.size
    ).astype(float)
    name = f"one draw at each of {draws} positions"
    return StatisticalCertificate(
        {name: chi_square_test(counts, reference, significance)},
        {name: detectable_tv(draws, int((reference > 0).sum()), significance, POWER)},
        draws,
    )
