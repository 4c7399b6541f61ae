"""Targets whose drafted blocks score other rows than their one-token passes: the batch
variance of llama.cpp's kernels (#27407, #25618, #28111: blocks of 4 and more rows computed by
another matrix path, each row's logits off by up to 0.8). Verification then reads rows that
target-only decoding never samples from, and the output drifts from it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spec_decode.core.models import Model, score


class BatchVariant:
    """``model`` whose rows in a block of drafted tokens are tilted: every logit moved by up to
    ``shift`` (a fixed pattern of the position), while ``next_dist`` (a plain pass) is the
    model's own row."""

    def __init__(self, model: Model, shift: float = 0.8) -> None:
        self.model, self.shift = model, shift
        self.vocab_size = int(model.vocab_size)

    def next_dist(self, prefix: Sequence[int]) -> np.ndarray:
        return np.asarray(self.model.next_dist(prefix), dtype=np.float64)

    def score(self, prefix: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        rows = score(self.model, prefix, tokens)
        if not tokens:
            return rows
        positions = len(prefix) + np.arange(len(rows))[:, None]
        tilt = np.exp(self.shift * np.cos(positions * (1 + np.arange(self.vocab_size))))
        tilted = rows * tilt
        return tilted / tilted.sum(axis=-1, keepdims=True)
