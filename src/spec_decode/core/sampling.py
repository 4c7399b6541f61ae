"""Sampling controls: the warp from a model's raw distribution to the one both models sample.

The exact rule is applied to the *warped* target and draft distributions, so speculative decoding
reproduces sampling from the warped target. Both models must be warped with the same controls;
warping them differently is a known exactness bug (see :mod:`spec_decode.certify.zoo`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from spec_decode.core.errors import BadRequest


@dataclass(frozen=True)
class Range:
    """The values a sampling control may take: finite numbers from ``low`` (excluded when
    ``low_open``) up to ``high``. Written once here and read by :class:`SamplingParams`, the
    server's request schema and the CLI's options."""

    low: float
    high: float = math.inf
    low_open: bool = False

    def __contains__(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        return math.isfinite(value) and above and value <= self.high

    def describe(self) -> str:
        """The rule in words: "must be >= 0", "must lie in (0, 1]"."""
        if math.isinf(self.high):
            return f"must be {'>' if self.low_open else '>='} {self.low:g}"
        return f"must lie in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"

    def check(self, name: str, value: float) -> float:
        """``value`` when it lies in the range, else a :class:`BadRequest` naming ``name``."""
        if value not in self:
            raise BadRequest(f"{name} {self.describe()}, got {value}", param=name)
        return value


#: The range of each sampling control (``top_k`` None, not 0, means no limit).
SAMPLING_RANGES = {
    "temperature": Range(0.0),
    "top_k": Range(1),
    "top_p": Range(0.0, 1.0, low_open=True),
    "min_p": Range(0.0, 1.0),
}


@dataclass(frozen=True)
class SamplingParams:
    """Temperature, top-k, top-p (nucleus) and min-p, applied in that order.

    Parameters
    ----------
    temperature
        Divides the logits. ``0`` means greedy: all mass on the most likely token, ties going to
        the lowest token id.
    top_k
        Keep only the ``top_k`` most likely tokens (ties broken by lowest id); ``None`` keeps all.
    top_p
        Keep the smallest set of most likely tokens whose mass reaches ``top_p``; ``1.0`` keeps all.
    min_p
        Drop tokens whose probability is below ``min_p`` times the largest; ``0.0`` keeps all.
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float = 1.0
    min_p: float = 0.0

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if value is not None:  # top_k None: no limit
                SAMPLING_RANGES[name].check(name, value)

    @property
    def greedy(self) -> bool:
        """Whether these controls reduce sampling to argmax decoding."""
        return self.temperature == 0

    @property
    def is_identity(self) -> bool:
        """Whether warping leaves distributions unchanged."""
        return self.temperature == 1 and self.top_k is None and self.top_p == 1 and self.min_p == 0

    def warp(self, probs: np.ndarray) -> np.ndarray:
        """Warp probability vectors (shape (V,) or (n, V)); zero entries stay zero."""
        probs = np.asarray(probs, dtype=np.float64)
        if self.greedy:  # the argmax of the probabilities is that of their logs: skip the log
            return _one_hot_argmax(probs)
        if self.is_identity:
            return probs / probs.sum(axis=-1, keepdims=True)
        with np.errstate(divide="ignore"):
            return self._warp_in_place(np.log(probs))

    def warp_logits(self, logits: np.ndarray) -> np.ndarray:
        """Turn logits (shape (V,) or (n, V); ``-inf`` allowed) into warped probabilities."""
        return self._warp_in_place(np.array(logits, dtype=np.float64))

    def _warp_in_place(self, logits: np.ndarray) -> np.ndarray:
        """Overwrite each row of a fresh float64 array of logits with its warped probabilities.

        In place because on a large vocabulary a second large temporary costs more than the
        arithmetic itself (in the allocator)."""
        for row in logits.reshape(-1, logits.shape[-1]):
            self._warp_row(row)
        return logits

    def _warp_row(self, row: np.ndarray) -> None:
        if self.greedy:
            top = np.argmax(row)  # the lowest id among ties
            row[:] = 0.0
            row[top] = 1.0
            return
        row -= row.max()
        row /= self.temperature
        np.exp(row, out=row)
        if self.top_k is not None and self.top_k < row.size:
            _keep_only(row, _ranked(row, self.top_k)[: self.top_k])
        if self.top_p < 1:
            # the likeliest tokens in rank order, as many as their mass needs: mass is a
            # running sum, so its prefix over a prefix of the ranks is the whole row's prefix
            total, wanted = row.sum(), _RANKED
            while True:
                by_rank = _ranked(row, wanted)
                mass = np.cumsum(row[by_rank]) / total
                n_keep = int(np.searchsorted(mass, self.top_p, side="left")) + 1
                if n_keep <= by_rank.size or by_rank.size == row.size:
                    break
                wanted *= 16
            _keep_only(row, by_rank[:n_keep])
        if self.min_p > 0:
            row[row < self.min_p * row.max()] = 0.0
        row /= row.sum()

    def kept_bounds(
        self, probs: np.ndarray, tolerance: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Which tokens the warp keeps whatever the perturbation of the raw row ``probs`` by at
        most ``tolerance`` (the largest change of the difference of any two raw logits), and
        which it may keep: ``(weights, surely, possibly)``, ``weights`` the row's tempered
        weights exp((logit - max) / T) (the warped row is them, cut and normalised), the other
        two boolean masks, surely within possibly. Not for greedy controls.

        With eps the tolerance over T and every log-weight moved up by between 0 and eps (a
        common factor changes no cut): top-k keeps a token surely when fewer than k others can
        reach it (within eps), and drops it surely when k others stay above it by more than
        eps; top-p keeps a token when the share of the tokens above it is below top_p, so
        surely when that share's largest value is (the tokens that may be above it at their
        most, against those surely below and itself), and drops it surely when its smallest
        value is not; min-p compares a log-weight with the largest, which moves by at most
        eps. A token near a cut does not make the whole row unstable: the sampler decides
        whether an uncertain token can matter.
        """
        with np.errstate(divide="ignore"):
            logits = np.log(np.asarray(probs, dtype=np.float64))
        scaled = (logits - logits.max()) / self.temperature
        weights = np.exp(scaled)
        surely, possibly = weights > 0, weights > 0
        if self.is_identity or (
            (self.top_k is None or self.top_k >= weights.size)
            and self.top_p == 1
            and self.min_p == 0
        ):
            return weights, surely, possibly
        eps = tolerance / self.temperature
        ascending = np.sort(scaled)
        size = ascending.size

        def at_least(x: np.ndarray) -> np.ndarray:  # how many log-weights are >= x
            return size - np.searchsorted(ascending, x, side="left")

        def above(x: np.ndarray) -> np.ndarray:  # how many are > x
            return size - np.searchsorted(ascending, x, side="right")

        with np.errstate(invalid="ignore"):  # -inf entries: neither surely nor possibly kept
            reach, beaten = at_least(scaled - eps) - 1, above(scaled + eps)
        if self.top_k is not None and self.top_k < size:
            surely &= reach < self.top_k
            possibly &= beaten < self.top_k
        if self.top_p < 1:
            p, grow = self.top_p, np.exp(eps)
            descending = np.argsort(-scaled, kind="stable")
            mass_possibly = np.concatenate([[0.0], np.cumsum((weights * possibly)[descending])])
            mass_surely = np.concatenate([[0.0], np.cumsum((weights * surely)[descending])])
            upper = reach + 1  # tokens that may be above (and the token itself)
            above_most = mass_possibly[upper] - weights * possibly
            below_least = mass_surely[-1] - mass_surely[upper] + weights
            above_least = mass_surely[beaten]
            below_most = mass_possibly[-1] - mass_possibly[beaten]
            with np.errstate(invalid="ignore", divide="ignore"):
                share_most = above_most * grow / (above_most * grow + below_least)
                share_least = above_least / (above_least + below_most * grow)
            surely &= share_most < p
            possibly &= ~(share_least >= p)
        if self.min_p > 0:
            threshold = np.log(self.min_p)
            surely &= scaled - eps >= threshold
            possibly &= scaled + eps >= threshold
        return weights, surely, possibly


#: How many of a row's likeliest tokens top-p ranks first (more only if their mass falls short).
_RANKED = 256


def _ranked(row: np.ndarray, n: int) -> np.ndarray:
    """The first ``n`` or more entries of ``np.argsort(-row, kind="stable")`` (descending, ties
    by id): every entry at least the n-th largest, ranked. Sorting those alone, not a whole
    vocabulary, is what keeps top-k and top-p cheap on a large one."""
    if n >= row.size:
        return np.argsort(-row, kind="stable")
    nth_largest = np.partition(row, row.size - n)[row.size - n]
    ids = np.flatnonzero(row >= nth_largest)  # ascending ids: the stable sort keeps ties so
    return ids[np.argsort(-row[ids], kind="stable")]


def _keep_only(row: np.ndarray, kept: np.ndarray) -> None:
    """Zero every entry of ``row`` but those at ``kept``."""
    values = row[kept]
    row[:] = 0.0
    row[kept] = values


def _one_hot_argmax(values: np.ndarray) -> np.ndarray:
    """All mass on each row's largest entry (the lowest id among ties, as ``argmax`` picks)."""
    onehot = np.zeros_like(values)
    np.put_along_axis(onehot, np.argmax(values, axis=-1)[..., None], 1.0, axis=-1)
    return onehot
