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


class NumpySource:
    """A :class:`RandomSource` backed by a ``numpy.random.Generator``.

    Certain outcomes (``bernoulli(1)``, a one-hot ``categorical``) consume no random numbers, so
    a deterministic drafter leaves the stream untouched.
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
        cumulative = np.cumsum(probs, dtype=np.float64)
        total = cumulative[-1]
        if not total > 0:
            raise ValueError("categorical: probabilities have no positive mass")
        # side="right" never lands on a zero-probability entry; only u * total rounding up to
        # total can run off the end, and then the last token with positive mass is meant.
        index = int(np.searchsorted(cumulative, self.generator.random() * total, side="right"))
        return index if index < len(cumulative) else int(np.flatnonzero(probs > 0)[-1])

    def uniform(self) -> float:
        return float(self.generator.random())


def as_source(rng: np.random.Generator | RandomSource) -> RandomSource:
    """Accept either a numpy generator or a ready :class:`RandomSource`."""
    if isinstance(rng, np.random.Generator):
        return NumpySource(rng)
    if isinstance(rng, RandomSource):
        return rng
    raise TypeError(f"rng must be a numpy Generator or a RandomSource, got {type(rng).__name__}")
