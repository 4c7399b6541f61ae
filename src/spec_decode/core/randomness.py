"""The one place where randomness enters the sampler.

Rules and drafters never touch numpy's generator: they draw through a :class:`RandomSource`.
Keeping the interface this narrow is what lets the exhaustive certificate swap the source for one
that forks the computation and visits every random branch of the real code with its exact
probability.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class RandomSource(Protocol):
    """Where rules and drafters get their randomness."""

    def bernoulli(self, prob: float) -> bool:
        """True with probability ``prob`` (clipped to [0, 1])."""
        ...

    def categorical(self, probs: np.ndarray) -> int:
        """An index drawn with probability proportional to ``probs``."""
        ...

    def uniform(self) -> float:
        """A uniform draw on [0, 1). The exhaustive certificate enumerates it exactly where it is
        only compared with thresholds (:mod:`spec_decode.certify.lazy_uniform`)."""
        ...


#: Entries per block of :meth:`NumpySource.categorical`'s two-level search.
CATEGORICAL_BLOCK = 1024


class NumpySource:
    """A :class:`RandomSource` backed by a ``numpy.random.Generator``.

    A certain ``bernoulli`` (probability 0 or 1) consumes no random number; ``categorical``
    draws one uniform per call, a one-hot row included.
    """

    def __init__(self, generator: np.random.Generator) -> None:
        self.generator = generator

    def bernoulli(self, prob: float) -> bool:
        if prob >= 1.0:
            return True
        if prob <= 0.0:
            return False
        return bool(self.generator.random() < prob)

    def categorical(self, probs: np.ndarray) -> int:
        """Inverse-CDF sampling in two levels: u * total is located among the sums of blocks of
        :data:`CATEGORICAL_BLOCK` entries, then inside its block. Two short cumulative sums
        instead of one over the whole row: a cumulative sum is sequential, a block sum is not."""
        probs = np.asarray(probs, dtype=np.float64)
        if probs.size < CATEGORICAL_BLOCK:  # one partial block: the same draw, in one level
            total = probs.sum()
            if not total > 0:
                raise ValueError("categorical: probabilities have no positive mass")
            return _first_above(np.cumsum(probs), self.generator.random() * total, probs)
        whole = probs.size - probs.size % CATEGORICAL_BLOCK  # entries in whole blocks
        sums = probs[:whole].reshape(-1, CATEGORICAL_BLOCK).sum(axis=1)
        cumulative = np.cumsum(np.append(sums, probs[whole:].sum()))
        total = cumulative[-1]
        if not total > 0:
            raise ValueError("categorical: probabilities have no positive mass")
        point = self.generator.random() * total
        # side="right" never lands on a block or an entry of zero mass; only rounding can run off
        # the end, and then the last block (or entry) with positive mass is meant.
        block = _first_above(cumulative, point, cumulative)
        start = block * CATEGORICAL_BLOCK
        entries = probs[start : start + CATEGORICAL_BLOCK]
        offset = point - (cumulative[block - 1] if block else 0.0)
        return start + _first_above(np.cumsum(entries), offset, entries)

    def uniform(self) -> float:
        return float(self.generator.random())


def _first_above(cumulative: np.ndarray, point: float, masses: np.ndarray) -> int:
    """The first index whose cumulative sum exceeds ``point``, or else the last one of positive
    ``masses`` (the point can reach the total only by rounding)."""
    index = int(np.searchsorted(cumulative, point, side="right"))
    return index if index < len(cumulative) else int(np.flatnonzero(masses > 0)[-1])


#: Seeds are taken modulo this: numpy's ``SeedSequence`` mixes its entropy into a 128-bit pool.
SEED_SPACE = 2**128


def fold_seed(seed: int) -> int:
    """Any integer as a numpy seed: ``seed mod 2**128`` (Python's modulo, so -1 becomes
    2**128 - 1). numpy refuses negative seeds; folding them, and seeds beyond 128 bits, makes
    every integer a user types a valid seed, while the seeds 0 .. 2**128 - 1 stay what they were
    (the same seed gives the same output as before)."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise ValueError(f"a seed must be an integer, got {seed!r}")
    return int(seed) % SEED_SPACE


def as_source(rng: np.random.Generator | RandomSource) -> RandomSource:
    """Accept either a numpy generator or a ready :class:`RandomSource`."""
    if isinstance(rng, np.random.Generator):
        return NumpySource(rng)
    if isinstance(rng, RandomSource):
        return rng
    raise TypeError(f"rng must be a numpy Generator or a RandomSource, got {type(rng).__name__}")
