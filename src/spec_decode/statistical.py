"""Seeded statistical certificate: sample the real generator and test it against the target.

Complements the exhaustive certificate where enumeration is too costly or impossible (code that
draws ``uniform()``, large vocabularies, real models). Three chi-square tests run on the same
samples: the first emitted token, the first two tokens jointly, and two tokens jointly at positions
k+1 and k+2, which always lie after the first verification block.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from spec_decode.drafters import Drafter
from spec_decode.exhaustive import target_joint
from spec_decode.models import Model
from spec_decode.policies import KPolicy
from spec_decode.rules import Rule, exact_rule
from spec_decode.sampling import SamplingParams
from spec_decode.speculative import generate_speculative
from spec_decode.stats import GoodnessOfFit, chi_square_test, detectable_tv

#: The chance a test detects the smallest TV it reports as detectable.
POWER = 0.99

#: A generator under test: called with a seeded numpy generator and a token count, returns tokens.
Generate = Callable[[np.random.Generator, int], Sequence[int]]


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
    target: Model,
    draft: Model | None,
    prefix: list[int],
    k: int,
    runs: int,
    seed: int,
    *,
    sampling: SamplingParams | None = None,
    rule: Rule = exact_rule,
    drafter: Drafter | None = None,
    significance: float = 1e-3,
    policy: KPolicy | None = None,
    generate: Generate | None = None,
) -> StatisticalCertificate:
    """Generate k + 3 tokens ``runs`` times and test three marginals against the target's.

    ``policy``, when given, chooses the number of drafts before each step instead of a fixed
    ``k``; ``k`` still sets how many tokens are generated and which positions are tested.
    ``generate``, when given, replaces :func:`~spec_decode.speculative.generate_speculative` (and
    ``draft``, ``rule``, ``drafter``, ``policy`` go unused): any generator whose first step emits
    at most k + 1 tokens, such as a tree generator with k its depth.
    """
    sampling = sampling or SamplingParams()
    vocab, n_tokens = target.vocab_size, k + 3
    rng = np.random.default_rng(seed)

    def speculative(rng: np.random.Generator, n_tokens: int) -> list[int]:
        return generate_speculative(
            target,
            draft,
            prefix,
            n_tokens,
            policy or k,
            rng,
            sampling=sampling,
            rule=rule,
            drafter=drafter,
        ).tokens

    generate = generate or speculative
    samples = np.array([generate(rng, n_tokens) for _ in range(runs)])
    joint = target_joint(lambda c: sampling.warp(target.next_dist(c)), vocab, prefix, n_tokens)
    marginals = {
        "first token": ((0,), joint.sum(axis=tuple(range(1, n_tokens)))),
        "tokens 1-2 jointly": ((0, 1), joint.sum(axis=tuple(range(2, n_tokens)))),
        f"tokens {k + 2}-{k + 3} jointly (after the first block)": (
            (k + 1, k + 2),
            joint.sum(axis=tuple(range(k + 1))),
        ),
    }
    tests, detectable = {}, {}
    for name, (positions, reference) in marginals.items():
        counts = np.zeros(reference.shape)
        np.add.at(counts, tuple(samples[:, i] for i in positions), 1)
        tests[name] = chi_square_test(counts, reference, significance)
        detectable[name] = detectable_tv(runs, reference.size, significance, POWER)
    return StatisticalCertificate(tests, detectable, runs)
