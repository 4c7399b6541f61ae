"""Broken positional noise: each must FAIL the positional sampler's certificates
(:mod:`spec_decode.certify.positional`) or the identity certificate
(:mod:`spec_decode.certify.identity`).

A position's noise must be keyed by the absolute output position and turned into a draw from p.
:class:`StepRelativeNoise` keys it by the offset within the step (a fresh noise vector per
verification block, as an engine indexing its block from 0 does); the two races are sampler
shortcuts that are not draws from p.
"""

from __future__ import annotations

import numpy as np

from spec_decode.core.noise import DelegatedDraws, PositionalSource
from spec_decode.core.samplers import NOISE_BLOCK, PositionNoise, RaceNoise


class StepRelativeNoise(DelegatedDraws):
    """BROKEN: the noise of the offset within the step instead of the absolute position (a
    fresh noise vector per verification block, indexed from 0). Every step's first token reuses
    one noise, so tokens of different steps are coupled to each other, and the output differs
    from target-only decoding's whenever a step emits fewer tokens than it could."""

    def __init__(self, inner: PositionalSource) -> None:
        self.inner = self.draws = inner.at(0)

    def noise(self, offset: int) -> PositionNoise:
        return self.inner.noise(offset)

    def at(self, start: int) -> StepRelativeNoise:
        return self


class RaceByProduct(RaceNoise):
    """BROKEN: the race keyed by E_i * p_i instead of E_i / p_i (a sign slip in log space:
    argmax of log p_i + log E_i is not the Gumbel trick). It favours the least likely tokens."""

    def _keys(self, stream: int, masses: np.ndarray) -> np.ndarray:
        keys = np.full(masses.size, np.inf)
        np.multiply(self._noise(stream, masses.size), masses, out=keys, where=masses > 0)
        return keys


class BlocksByLargestEntry(RaceNoise):
    """BROKEN: the two-level race with blocks raced by their largest entry instead of their mass
    (a shortcut that reads one number per block). A block of many small entries loses to a block
    holding one large one far more often than its mass says."""

    def choose(self, probs: np.ndarray) -> int:
        probs = np.asarray(probs, dtype=np.float64)
        padded = np.zeros(-(-probs.size // NOISE_BLOCK) * NOISE_BLOCK)
        padded[: probs.size] = probs
        largest = padded.reshape(-1, NOISE_BLOCK).max(axis=1)
        block = int(np.argmin(self._keys(0, largest)))
        start = block * NOISE_BLOCK
        return start + int(np.argmin(self._keys(1 + block, probs[start : start + NOISE_BLOCK])))
