"""Samplers of one position's noise: S(p, xi), a token drawn from p with the noise xi, and whether
that choice is stable when p moves a little (:func:`choice_stable`).

* :class:`RaceNoise`, the exponential race y = argmin_i E_i / p_i (Gumbel-max), in two levels:
  blocks of :data:`NOISE_BLOCK` entries race by their mass, then the entries of the winning
  block by theirs, each level with its own Philox stream keyed by (seed, position, block).
* :class:`UniformNoise`, the inverse CDF: one uniform compared with cumulative thresholds only,
  which the exhaustive certificate can enumerate (:mod:`spec_decode.certify.lazy_uniform`).

Where the noise of a position comes from is :mod:`spec_decode.core.noise`'s.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from spec_decode.core.sampling import SamplingParams

#: Entries per block of the two-level race and of the two-level inverse-CDF search.
NOISE_BLOCK = 1024
#: Philox counter word that tells the streams of one position apart (block race, each block's
#: entries, the inverse-CDF uniform); word 1 holds the position, word 0 counts draws.
_STREAM_WORD = 2


@runtime_checkable
class PositionNoise(Protocol):
    """The noise of one output position, and the sampler that turns it into tokens."""

    def choose(self, probs: np.ndarray) -> int:
        """S(p, xi): a token drawn from ``probs`` with this position's noise."""
        ...

    def ranked(self, probs: np.ndarray, m: int) -> list[int]:
        """Up to ``m`` distinct tokens of positive probability, best first under this noise;
        the first is :meth:`choose`'s token (a tree's siblings drawn without replacement)."""
        ...


def generator_at(key: np.ndarray, position: int, stream: int) -> np.random.Generator:
    """Philox keyed by the seed, its counter starting at (0, position, stream, 0)."""
    counter = np.zeros(4, dtype=np.uint64)
    counter[1], counter[_STREAM_WORD] = position, stream
    return np.random.Generator(np.random.Philox(key=key, counter=counter))


class RaceNoise:
    """The exponential race at one position: block noise (stream 0) and each block's entry
    noise (stream 1 + block), drawn when first needed; ``flat`` races every entry at once
    (stream 1, float32 exponentials, as a GPU kernel would)."""

    def __init__(self, key: np.ndarray, position: int, flat: bool = False) -> None:
        self.key, self.position, self.flat = key, position, flat
        self._exponentials: dict[tuple[int, int], np.ndarray] = {}

    def _noise(self, stream: int, size: int) -> np.ndarray:
        if (stream, size) not in self._exponentials:
            generator = generator_at(self.key, self.position, stream)
            dtype = np.float32 if self.flat else np.float64
            self._exponentials[stream, size] = generator.standard_exponential(size, dtype=dtype)
        return self._exponentials[stream, size]

    def _keys(self, stream: int, masses: np.ndarray) -> np.ndarray:
        """E_i / mass_i, infinite where the mass is zero."""
        keys = np.full(masses.size, np.inf)
        np.divide(self._noise(stream, masses.size), masses, out=keys, where=masses > 0)
        return keys

    def choose(self, probs: np.ndarray) -> int:
        probs = _positive_mass(probs)
        if self.flat:
            return int(np.argmin(self._keys(1, probs)))
        block = int(np.argmin(self._keys(0, _block_sums(probs))))
        start = block * NOISE_BLOCK
        return start + int(np.argmin(self._keys(1 + block, probs[start : start + NOISE_BLOCK])))

    def is_stable(
        self,
        probs: np.ndarray,
        weights: np.ndarray,
        surely: np.ndarray,
        possibly: np.ndarray,
        eps: float,
    ) -> bool:
        """Whether :meth:`choose` on ``probs`` stays put when the tokens ``possibly`` kept may
        join those ``surely`` kept and every one's log-weight (``weights``, proportional to
        ``probs`` where kept) moves by at most ``eps``: the winner is surely kept and its log-key
        beats every other possibly kept key by more than eps, at each level (a block's key at
        its least mass against the others' at their most)."""
        token = self.choose(probs)
        if not surely[token]:
            return False
        if self.flat:
            return _beats(self._keys(1, np.where(possibly, weights, 0.0)), token, eps)
        least = _block_sums(np.where(surely, weights, 0.0))
        most = _block_sums(np.where(possibly, weights, 0.0))
        block, start = token // NOISE_BLOCK, token // NOISE_BLOCK * NOISE_BLOCK
        keys = self._keys(0, most)
        keys[block] = self._keys(0, least)[block]
        entries = np.where(possibly, weights, 0.0)[start : start + NOISE_BLOCK]
        entry_keys = self._keys(1 + block, entries)
        return _beats(keys, block, eps) and _beats(entry_keys, token - start, eps)

    def ranked(self, probs: np.ndarray, m: int) -> list[int]:
        """Blocks in race order, entries of each block in race order (flat: entries in race
        order); entries of zero mass never."""
        probs = _positive_mass(probs)
        if self.flat:
            return _best(self._keys(1, probs), m)
        tokens: list[int] = []
        for block in _best(self._keys(0, _block_sums(probs)), probs.size):
            start = block * NOISE_BLOCK
            entries = probs[start : start + NOISE_BLOCK]
            tokens += [start + i for i in _best(self._keys(1 + block, entries), m - len(tokens))]
            if len(tokens) == m:
                break
        return tokens


class UniformNoise:
    """Inverse CDF on one uniform ``u``: the point u * total is located among the cumulative
    sums of blocks of :data:`NOISE_BLOCK` entries, then inside its block. Only comparisons of u
    with thresholds (``bisect``), so a lazily resolved uniform is enumerated exactly."""

    def __init__(self, u: float) -> None:
        self.u = u

    def choose(self, probs: np.ndarray) -> int:
        probs = _positive_mass(probs)
        cumulative = np.cumsum(_block_sums(probs))
        point = self.u * float(cumulative[-1])
        block = _first_above(cumulative, point, cumulative)
        start = block * NOISE_BLOCK
        entries = probs[start : start + NOISE_BLOCK]
        offset = point - (float(cumulative[block - 1]) if block else 0.0)
        return start + _first_above(np.cumsum(entries), offset, entries)

    def is_stable(
        self,
        probs: np.ndarray,
        weights: np.ndarray,
        surely: np.ndarray,
        possibly: np.ndarray,
        eps: float,
    ) -> bool:
        """Whether :meth:`choose` on ``probs`` stays put when the tokens ``possibly`` kept may
        join those ``surely`` kept and every one's log-weight moves by at most ``eps``: as
        with A the mass up to and including the token and B the rest, every entry scaled by a
        factor in [1, e^eps] keeps the share A / (A + B) between A / (A + B e^eps) and
        A e^eps / (A e^eps + B); u stays below it while eps < log(A (1 - u) / (u B)), and
        likewise above the share before the token, with the masses on the side away from u at
        their most."""
        token, u = self.choose(probs), float(self.u)
        if not surely[token]:
            return False
        least, most = np.where(surely, weights, 0.0), np.where(possibly, weights, 0.0)
        upto, rest = float(least[: token + 1].sum()), float(most[token + 1 :].sum())
        below, after = float(most[:token].sum()), float(least[token:].sum())
        with np.errstate(divide="ignore"):
            if rest > 0 and not (u > 0 and np.log(upto * (1 - u) / (u * rest)) > eps):
                return False
            return not (below > 0 and not np.log(u * after / ((1 - u) * below)) > eps)

    def ranked(self, probs: np.ndarray, m: int) -> list[int]:
        """:meth:`choose`'s token, then the most probable others (lowest id on ties): one
        uniform orders nothing else."""
        probs = _positive_mass(probs)
        first = self.choose(probs)
        others = np.flatnonzero(probs > 0)
        others = others[others != first]
        by_mass = others[np.argsort(-probs[others], kind="stable")[: m - 1]] if m > 1 else []
        return [first, *(int(t) for t in by_mass)]


#: Added to every tolerance :func:`choice_stable` checks, for the float rounding of its bounds
#: and of the choice (sums in another order); far above it, far below any tolerance.
MARGIN_ROUNDING = 1e-9


def choice_stable(
    sampling: SamplingParams, raw_row: np.ndarray, noise: PositionNoise, tolerance: float
) -> bool:
    """Whether ``noise.choose(sampling.warp(raw_row))`` stays put under every perturbation of the
    raw row by at most ``tolerance`` (the largest change of the difference of any two raw
    logits): the test settling uses (:mod:`spec_decode.core.near_ties`).

    A token near a top-k, top-p or min-p cut makes the choice unstable only if it could win
    (:meth:`~spec_decode.core.sampling.SamplingParams.kept_bounds`): on a large vocabulary
    some token nearly always sits near a top-p or min-p cut, so a test that gave up on the
    whole row there would settle nearly every row. Greedy controls: True (the backend checks
    the top two itself). A noise without ``is_stable``: False (always settle).
    """
    if sampling.greedy:
        return True
    check = getattr(noise, "is_stable", None)
    if check is None:
        return False
    tolerance += MARGIN_ROUNDING
    weights, surely, possibly = sampling.kept_bounds(raw_row, tolerance)
    return bool(
        check(sampling.warp(raw_row), weights, surely, possibly, tolerance / sampling.temperature)
    )


def _beats(keys: np.ndarray, winner: int, eps: float) -> bool:
    """Whether log(keys[winner]) is below every other finite key's log by more than ``eps``."""
    others = np.delete(keys, winner)
    others = others[np.isfinite(others)]
    if others.size == 0:
        return True
    best = float(others.min())
    if best == 0:
        return False
    with np.errstate(divide="ignore"):
        return bool(np.log(best) - np.log(keys[winner]) > eps)


def _positive_mass(probs: np.ndarray) -> np.ndarray:
    probs = np.asarray(probs, dtype=np.float64)
    if probs.ndim != 1 or not probs.sum() > 0:
        raise ValueError("positional sampling needs one row with positive mass")
    return probs


def _block_sums(probs: np.ndarray) -> np.ndarray:
    """Mass of each block of :data:`NOISE_BLOCK` entries (the last one may be shorter)."""
    whole = probs.size - probs.size % NOISE_BLOCK
    sums = probs[:whole].reshape(-1, NOISE_BLOCK).sum(axis=1)
    return np.append(sums, probs[whole:].sum()) if whole < probs.size else sums


def _best(keys: np.ndarray, m: int) -> list[int]:
    """Indices of the ``m`` smallest finite keys, smallest first."""
    finite = np.flatnonzero(np.isfinite(keys))
    if m <= 0 or finite.size == 0:
        return []
    if finite.size > m:
        finite = finite[np.argpartition(keys[finite], m - 1)[:m]]
    return [int(i) for i in finite[np.argsort(keys[finite], kind="stable")]]


def _first_above(cumulative: Sequence[float], point: object, masses: np.ndarray) -> int:
    """The first index whose cumulative sum exceeds ``point`` (found by comparisons only), or
    else the last one of positive ``masses`` (the point reaches the total only by rounding)."""
    index = bisect.bisect_right(cumulative, point)  # type: ignore[call-overload]
    return index if index < len(cumulative) else int(np.flatnonzero(masses > 0)[-1])
