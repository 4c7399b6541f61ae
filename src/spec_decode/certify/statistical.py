"""Seeded statistical certificate: sample the real generator and test it against the target.

Complements the exhaustive certificate where enumeration is too costly or impossible (code that
draws ``uniform()``, large vocabularies, real models). Three chi-square tests run on the same
samples: the first emitted token, the first two tokens jointly, and two tokens jointly at positions
k+1 and k+2, which always lie after the first verification block.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from spec_decode.certify.generators import Generate
from spec_decode.certify.goodness_of_fit import GoodnessOfFit, chi_square_test, detectable_tv
from spec_decode.certify.reference import warped_target_joint
from spec_decode.core.models import Model
from spec_decode.core.sampling import SamplingParams

#: The chance a test detects the smallest TV it reports as detectable.
POWER = 0.99


@dataclass(frozen=True)
class StatisticalCertificate:
    """Goodness-of-fit tests of the generator's output against target-only sampling.

    ``detectable_tv[name]`` is the smallest total-variation distance (over that test's cells)
    the test detects with probability >= :data:`POWER`; the false-alarm rate of each test is its
    ``significance``.
    """

    tests: dict[str, GoodnessOfFit]
    detectable_tv: dict[str, float]
    runs: int

    @property
    def passed(self) -> bool:
        return not any(test.rejected for test in self.tests.values())


def statistical_certificate(
    generate: Generate,
    target: Model,
    prefix: Sequence[int],
    block: int,
    runs: int,
    seed: int,
    *,
    sampling: SamplingParams | None = None,
    significance: float = 1e-3,
) -> StatisticalCertificate:
    """Run ``generate`` for block + 3 tokens ``runs`` times and test three marginals against the
    ``sampling``-warped target's.

    ``block`` is the most drafts a first step can hold (k for a chain, the depth for a tree), so
    tokens block + 2 and block + 3 always come after the first verification; ``sampling`` must be
    the controls the generator itself was given.
    """
    n_tokens = block + 3
    rng = np.random.default_rng(seed)
    samples = np.array([generate(rng, n_tokens) for _ in range(runs)])
    joint = warped_target_joint(target, sampling or SamplingParams(), prefix, n_tokens)
    marginals = {
        "first token": ((0,), joint.sum(axis=tuple(range(1, n_tokens)))),
        "tokens 1-2 jointly": ((0, 1), joint.sum(axis=tuple(range(2, n_tokens)))),
        f"tokens {block + 2}-{block + 3} jointly (after the first block)": (
            (block + 1, block + 2),
            joint.sum(axis=tuple(range(block + 1))),
        ),
    }
    tests, detectable = {}, {}
    for name, (positions, reference) in marginals.items():
        counts = np.zeros(reference.shape)
        np.add.at(counts, tuple(samples[:, i] for i in positions), 1)
        tests[name] = chi_square_test(counts, reference, significance)
        detectable[name] = detectable_tv(runs, reference.size, significance, POWER)
    return StatisticalCertificate(tests, detectable, runs)


def joint_certificate(
    generate: Generate,
    target: Model,
    prefix: Sequence[int],
    n_tokens: int,
    runs: int,
    seed: int,
    *,
    sampling: SamplingParams | None = None,
    significance: float = 1e-3,
) -> StatisticalCertificate:
    """One chi-square test of the joint distribution of the first ``n_tokens`` emitted tokens
    (``runs`` seeded samples) against the ``sampling``-warped target's joint.

    With ``n_tokens`` = k + 3 the joint spans the first verification block and the two steps after
    it, so any dependence between positions (a uniform shared across acceptances, a bias only
    after a full block) shows, which marginals can miss.
    """
    rng = np.random.default_rng(seed)
    samples = np.array([generate(rng, n_tokens) for _ in range(runs)])
    reference = warped_target_joint(target, sampling or SamplingParams(), prefix, n_tokens)
    counts = np.zeros(reference.shape)
    np.add.at(counts, tuple(samples.T), 1)
    name = f"tokens 1-{n_tokens} jointly"
    return StatisticalCertificate(
        {name: chi_square_test(counts, reference, significance)},
        {name: detectable_tv(runs, reference.size, significance, POWER)},
        runs,
    )
