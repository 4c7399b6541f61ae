"""What a generator's output is compared with: the target's own joint distribution, and the
tolerance within which two distributions count as equal."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from spec_decode.core.distributions import check_distributions
from spec_decode.core.models import Model
from spec_decode.core.sampling import SamplingParams

#: A certificate passes when the worst total-variation distance stays below this.
TV_TOLERANCE = 1e-12


def target_joint(
    next_dist: Callable[[list[int]], np.ndarray], vocab_size: int, prefix: Sequence[int], n: int
) -> np.ndarray:
    """The joint distribution of the next ``n`` tokens under ``next_dist``, shape (V,) * n.

    ``next_dist`` must return already-warped distributions; the joint is the product of the
    next-token probabilities along each of the V**n sequences.
    """
    joint = np.zeros((vocab_size,) * n)
    for sequence in itertools.product(range(vocab_size), repeat=n):
        prob, context = 1.0, list(prefix)
        for token in sequence:
            prob *= check_distributions(next_dist(context), vocab_size)[token]
            if prob == 0:
                break
            context.append(token)
        joint[sequence] = prob
    return joint


def warped_target_joint(
    target: Model, sampling: SamplingParams, prefix: Sequence[int], n: int
) -> np.ndarray:
    """The reference: target-only sampling's joint distribution of its next ``n`` tokens."""
    return target_joint(lambda c: sampling.warp(target.next_dist(c)), target.vocab_size, prefix, n)


@dataclass(frozen=True)
class ExactComparison:
    """The generator's exact n-token output distribution beside the target's own joint."""

    speculative: np.ndarray
    target: np.ndarray
    paths: int

    @property
    def tv(self) -> float:
        """Total-variation distance between the two joints: 0 up to rounding when exact."""
        return 0.5 * float(np.abs(self.speculative - self.target).sum())

    @property
    def total_probability(self) -> float:
        return float(self.speculative.sum())
