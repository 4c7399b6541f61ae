"""Toy models on a simulated clock for the calibration tests (a module beside them, not a test
file): no test asserts a timing, the models advance the clock by what each call "costs"."""

from __future__ import annotations

import numpy as np

from spec_decode import random_markov
from spec_decode.backends import calibration


class Clock:
    """A simulated clock: the models below advance it by what each call "costs"."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


CLOCK = Clock()
#: How many block sizes a default calibration times.
SIZES = len(calibration.BLOCK_SIZES)
SIZE_LIST = list(calibration.BLOCK_SIZES)


class CountingModel:
    """A toy model with a path and thread count, counting the tokens of every scoring call; a
    call scoring n tokens takes ``per_token * n`` simulated seconds, plus the next of ``delays``
    (other work on the machine) while any are left."""

    def __init__(self, path, threads: int = 2, per_token: float = 0.01) -> None:
        self.inner = random_markov(8, seed=0)
        self.vocab_size, self.path, self.n_threads = 8, path, threads
        self.per_token = per_token
        self.delays: list[float] = []
        self.blocks: list[int] = []
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1

    def next_dist(self, prefix):
        return self.inner.next_dist(prefix)

    def score(self, prefix, tokens):
        self.blocks.append(len(tokens) + 1)
        CLOCK.now += self.per_token * (len(tokens) + 1) + (self.delays.pop(0) if self.delays else 0)
        return np.array(
            [self.inner.next_dist([*prefix, *tokens[:i]]) for i in range(len(tokens) + 1)]
        )
