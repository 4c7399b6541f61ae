"""Sampling controls: the warp from a model's raw distribution to the one both models sample.

The exact rule is applied to the *warped* target and draft distributions, so speculative decoding
reproduces sampling from the warped target. Both models must be warped with the same controls;
warping them differently is a known exactness bug (see :mod:`spec_decode.certify.zoo`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
        if not (np.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1 (or None for no limit), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must lie in (0, 1], got {self.top_p}")
        if not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p must lie in [0, 1], got {self.min_p}")

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
            by_rank = np.argsort(-row, kind="stable")
            row[by_rank[self.top_k :]] = 0.0
        if self.top_p < 1:
            by_rank = np.argsort(-row, kind="stable")
            mass = np.cumsum(row[by_rank]) / row.sum()
            n_keep = int(np.searchsorted(mass, self.top_p, side="left")) + 1
            row[by_rank[n_keep:]] = 0.0
        if self.min_p > 0:
            row[row < self.min_p * row.max()] = 0.0
        row /= row.sum()


def _one_hot_argmax(values: np.ndarray) -> np.ndarray:
    """All mass on each row's largest entry (the lowest id among ties, as ``argmax`` picks)."""
    onehot = np.zeros_like(values)
    np.put_along_axis(onehot, np.argmax(values, axis=-1)[..., None], 1.0, axis=-1)
    return onehot
