"""The identity certificate: for every seed, speculative decoding emits exactly the token ids
target-only decoding emits with the same positional noise.

This is a per-seed property, stronger than equality in distribution, and the coupled rule
(:mod:`spec_decode.core.coupled`) has it by construction; the certificate runs both generators
on many seeds and lists every seed where they differ. It also counts the drafts accepted and
rejected along the way, so a pass can be told apart from a vacuous one (nothing ever drafted,
or every draft accepted).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from spec_decode.core.generate import generate_autoregressive
from spec_decode.core.models import Model
from spec_decode.core.noise import PositionalSource, SeededNoise
from spec_decode.core.sampling import SamplingParams
from spec_decode.core.trace import Trace

#: (positional source, number of tokens) -> the run's trace.
Run = Callable[[PositionalSource, int], Trace]


@dataclass(frozen=True)
class IdentityCertificate:
    """Seeds tried, those whose token ids differed, and the drafts verified over all runs."""

    seeds: int
    mismatched: tuple[int, ...]
    drafted: int
    accepted: int

    @property
    def passed(self) -> bool:
        return not self.mismatched

    @property
    def exercised(self) -> bool:
        """Whether the runs both accepted and rejected drafts (a pass is not vacuous)."""
        return 0 < self.accepted < self.drafted


def identity_certificate(
    speculative: Run,
    target_only: Run,
    seeds: Iterable[int],
    n_tokens: int,
    sampler: str = "race",
) -> IdentityCertificate:
    """Run both generators for ``n_tokens`` on each seed, each with a fresh
    :class:`~spec_decode.core.noise.SeededNoise` of that seed and ``sampler``; compare ids."""
    mismatched: list[int] = []
    tried = drafted = accepted = 0
    for seed in seeds:
        tried += 1
        trace = speculative(_noise(seed, sampler), n_tokens)
        drafted, accepted = drafted + trace.proposed, accepted + trace.accepted
        if trace.tokens != target_only(_noise(seed, sampler), n_tokens).tokens:
            mismatched.append(seed)
    return IdentityCertificate(tried, tuple(mismatched), drafted, accepted)


def _noise(seed: int, sampler: str) -> SeededNoise:
    return SeededNoise(np.random.SeedSequence(seed), sampler)


def target_only_run(target: Model, prefix: Sequence[int], sampling: SamplingParams) -> Run:
    """Target-only decoding as a :data:`Run`."""
    return lambda source, n: generate_autoregressive(target, prefix, n, source, sampling=sampling)
