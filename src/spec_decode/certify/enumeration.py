"""Exact output distribution of a random program, by running it down every random branch.

:class:`EnumeratingSource` is a :class:`~spec_decode.core.randomness.RandomSource` that replays a
recorded sequence of choices and records the alternatives at each new choice point. Re-running the
unmodified code under it, odometer-style, visits every execution path exactly once together with
its exact probability; zero-probability branches are pruned and paths are merged by what they emit.
Nothing is re-derived: the distribution is the implementation's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


class NotEnumerable(Exception):
    """The code drew a continuous ``uniform()``, whose branches cannot be enumerated."""


class EnumeratingSource:
    """Follows ``choices`` (option indices) at the first choice points, then option 0, recording
    how many options each point had and multiplying up the path's probability."""

    def __init__(self, choices: list[int]) -> None:
        self.choices = choices
        self.widths: list[int] = []
        self.probability = 1.0

    def _choose(self, options: list[tuple[object, float]]) -> object:
        depth = len(self.widths)
        if depth == len(self.choices):
            self.choices.append(0)
        self.widths.append(len(options))
        value, prob = options[self.choices[depth]]
        self.probability *= prob
        return value

    def bernoulli(self, prob: float) -> bool:
        prob = min(max(float(prob), 0.0), 1.0)
        return bool(self._choose([(o, w) for o, w in ((True, prob), (False, 1.0 - prob)) if w > 0]))

    def categorical(self, probs: np.ndarray) -> int:
        probs = np.asarray(probs, dtype=float)
        support = np.flatnonzero(probs > 0)
        if support.size == 0:
            raise ValueError("categorical: probabilities have no positive mass")
        weights = probs[support] / probs[support].sum()
        return int(self._choose(list(zip(support.tolist(), weights, strict=True))))

    def uniform(self) -> float:
        raise NotEnumerable(
            "the code calls uniform(); only bernoulli/categorical can be enumerated"
        )


@dataclass(frozen=True)
class Enumeration:
    """Exact distribution of a random program's output, with the cost of computing it."""

    distribution: dict[tuple[int, ...], float]
    paths: int

    @property
    def total_probability(self) -> float:
        return float(sum(self.distribution.values()))


def enumerate_outputs(
    program: Callable[[EnumeratingSource], Sequence[int]], max_paths: int = 5_000_000
) -> Enumeration:
    """Run ``program`` once per execution path; return its exact output distribution."""
    distribution: dict[tuple[int, ...], float] = {}
    choices: list[int] = []
    paths = 0
    while True:
        source = EnumeratingSource(choices)
        output = tuple(int(t) for t in program(source))
        distribution[output] = distribution.get(output, 0.0) + source.probability
        paths += 1
        if paths > max_paths:
            raise RuntimeError(f"more than {max_paths} execution paths; use a smaller case")
        # Odometer: advance the deepest choice point that still has an untried option.
        widths = source.widths
        depth = len(widths) - 1
        while depth >= 0 and choices[depth] + 1 >= widths[depth]:
            depth -= 1
        if depth < 0:
            return Enumeration(distribution, paths)
        del choices[depth + 1 :]
        choices[depth] += 1
