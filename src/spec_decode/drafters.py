"""Drafters: propose k tokens and report the distributions they were drawn from.

A drafter has a ``vocab_size`` and ``propose(prefix, k, rng) -> (tokens, q)`` with ``q`` of shape
(len(tokens), V). It may propose fewer than ``k`` tokens (none at all means one plain target
step). Exactness needs only that each token really was drawn from the ``q`` row reported for it;
a deterministic drafter reports one-hot rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from spec_decode.distributions import check_distributions
from spec_decode.models import Model
from spec_decode.randomness import RandomSource
from spec_decode.sampling import SamplingParams


class Drafter(Protocol):
    """The drafter interface."""

    vocab_size: int

    def propose(
        self, prefix: Sequence[int], k: int, rng: RandomSource
    ) -> tuple[list[int], np.ndarray]: ...


@dataclass(frozen=True)
class ModelDrafter:
    """Samples ``k`` tokens autoregressively from a draft model under the sampling controls."""

    model: Model
    sampling: SamplingParams = field(default_factory=SamplingParams)

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    def propose(
        self, prefix: Sequence[int], k: int, rng: RandomSource
    ) -> tuple[list[int], np.ndarray]:
        context = list(prefix)
        tokens: list[int] = []
        rows = np.empty((k, self.vocab_size))
        for i in range(k):
            raw = check_distributions(
                self.model.next_dist(context), self.vocab_size, "draft distribution"
            )
            rows[i] = self.sampling.warp(raw)
            tokens.append(rng.categorical(rows[i]))
            context.append(tokens[-1])
        return tokens, rows
