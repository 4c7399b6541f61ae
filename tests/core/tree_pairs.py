"""The Markov pairs and generator the tree tests share (a module beside them, not a test file)."""

from __future__ import annotations

import numpy as np

from spec_decode import draft_from_target, random_markov


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def pair(vocab: int, order: int = 1, agreement: float = 0.5):
    target = random_markov(vocab, seed=vocab + 10 * order, order=order)
    return target, draft_from_target(target, agreement, seed=99)
