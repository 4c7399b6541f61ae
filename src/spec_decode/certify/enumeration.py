"""Exact output distribution of a random program, by running it down every random branch.

:class:`EnumeratingSource` is a :class:`~spec_decode.core.randomness.RandomSource` that replays a
recorded sequence of choices and records the alternatives at each new choice point. Re-running the
unmodified code under it, odometer-style, visits every execution path exactly once together with
its exact probability; zero-probability branches are pruned and paths are merged by what they emit.
Nothing is re-derived: the distribution is the implementation's own. ``uniform()`` returns a
:class:`~spec_decode.certify.lazy_uniform.LazyUniform`, so code that only compares its uniforms
with thresholds is enumerated exactly too.

The enumeration checks itself, because a wrong replay silently gives a wrong distribution (a KV
cache surviving from one path to the next changed the draft's q and lost 4 of 472 paths):

* **replay determinism**: replaying a recorded prefix of choices must meet the same options with
  the same probabilities (within ``replay_tolerance``) at every recorded choice point;
* **total probability**: the path probabilities must sum to 1 within ``total_tolerance``. Each
  path's probability is a product of at most a few dozen factors, each rounded once, so its
  relative error is below 100 machine epsilons (2.2e-14); summed over paths of total mass 1 the
  error stays far below the default 1e-12, which exact code therefore never trips.

A violation raises :class:`EnumerationError`. Stateful programs (caches) pass ``reset``, called
before every path, so each path starts from the same state.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from spec_decode.certify.lazy_uniform import LazyUniform, NotEnumerable

#: Default bound on |total probability - 1| (see the module docstring for why it is safe).
TOTAL_TOLERANCE = 1e-12
#: Default bound on how far a replayed option's probability may move from the recorded one.
REPLAY_TOLERANCE = 1e-12

__all__ = [
    "EnumeratingSource",
    "Enumeration",
    "EnumerationBudgetExceeded",
    "EnumerationError",
    "NotEnumerable",
    "enumerate_outputs",
]


class EnumerationError(RuntimeError):
    """The enumeration is not trustworthy: a replay met different choice points, or the path
    probabilities do not sum to 1. The program is not a deterministic function of its choices."""


class EnumerationBudgetExceeded(RuntimeError):
    """The program has more execution paths, or takes longer, than the stated budget allows."""


#: What a choice point offered: its option values and their probabilities.
ChoicePoint = tuple[tuple[object, ...], tuple[float, ...]]


class EnumeratingSource:
    """Follows ``choices`` (option indices) at the first choice points, then option 0, recording
    the options of each point (in ``recorded``, shared across paths) and multiplying up the path's
    probability. At an already recorded point the options must match the record."""

    def __init__(
        self,
        choices: list[int],
        recorded: list[ChoicePoint] | None = None,
        replay_tolerance: float = REPLAY_TOLERANCE,
    ) -> None:
        self.choices = choices
        self.recorded = [] if recorded is None else recorded
        self.replay_tolerance = replay_tolerance
        self.widths: list[int] = []
        self.probability = 1.0

    def _choose(self, options: list[tuple[object, float]]) -> object:
        depth = len(self.widths)
        point = (tuple(v for v, _ in options), tuple(float(w) for _, w in options))
        if depth < len(self.recorded):
            self._check_replay(depth, point)
        else:
            self.recorded.append(point)
        if depth == len(self.choices):
            self.choices.append(0)
        self.widths.append(len(options))
        value, prob = options[self.choices[depth]]
        self.probability *= prob
        return value

    def _check_replay(self, depth: int, point: ChoicePoint) -> None:
        values, probs = self.recorded[depth]
        same = values == point[0] and (
            probs == point[1]  # the usual case, compared at C speed
            or all(
                abs(a - b) <= self.replay_tolerance for a, b in zip(probs, point[1], strict=True)
            )
        )
        if not same:
            first = _show((values, probs))
            raise EnumerationError(
                f"replay is not deterministic: choice point {depth} offered {first} "
                f"when first reached and {_show(point)} on replay; the program keeps state "
                "between paths (pass reset=...) or draws randomness outside the source"
            )

    def bernoulli(self, prob: float) -> bool:
        prob = min(max(float(prob), 0.0), 1.0)
        return bool(self._choose([(o, w) for o, w in ((True, prob), (False, 1.0 - prob)) if w > 0]))

    def categorical(self, probs: np.ndarray) -> int:
        probs = np.asarray(probs, dtype=float)
        support = np.flatnonzero(probs > 0)
        if support.size == 0:
            raise ValueError("categorical: probabilities have no positive mass")
        mass = probs[support]
        weights = (mass / mass.sum()).tolist()
        return int(self._choose(list(zip(support.tolist(), weights, strict=True))))

    def uniform(self) -> LazyUniform:  # type: ignore[override]
        """A lazily resolved draw: each comparison with a threshold is a choice point."""
        return LazyUniform.new(self._choose)


def _show(point: ChoicePoint) -> str:
    return ", ".join(f"{v}: {w:.17g}" for v, w in zip(*point, strict=True)) or "nothing"


@dataclass(frozen=True)
class Enumeration:
    """Exact distribution of a random program's output, with the cost of computing it."""

    distribution: dict[tuple[int, ...], float]
    paths: int

    @property
    def total_probability(self) -> float:
        return float(sum(self.distribution.values()))


def enumerate_outputs(
    program: Callable[[EnumeratingSource], Sequence[int]],
    max_paths: int = 5_000_000,
    *,
    reset: Callable[[], None] | None = None,
    total_tolerance: float = TOTAL_TOLERANCE,
    replay_tolerance: float = REPLAY_TOLERANCE,
    max_seconds: float | None = None,
) -> Enumeration:
    """Run ``program`` once per execution path (after ``reset()`` when given); return its exact
    output distribution.

    Raises :class:`EnumerationError` when a replay meets other options than recorded or the total
    probability is off by more than ``total_tolerance``; :class:`EnumerationBudgetExceeded` past
    ``max_paths`` paths or ``max_seconds`` seconds of this process's CPU time (not wall time, so
    the budget a program gets does not depend on what else the machine runs);
    :class:`NotEnumerable` when the program uses a uniform draw other than by comparing it.
    """
    distribution: dict[tuple[int, ...], float] = {}
    choices: list[int] = []
    recorded: list[ChoicePoint] = []
    paths, started = 0, time.process_time()  # CPU seconds: a busy machine does not shorten them
    while True:
        if reset is not None:
            reset()
        source = EnumeratingSource(choices, recorded, replay_tolerance)
        output = tuple(int(t) for t in program(source))
        if len(source.widths) < len(recorded):
            raise EnumerationError(
                f"replay is not deterministic: the program stopped after {len(source.widths)} "
                f"choice points where the recorded path had {len(recorded)}"
            )
        distribution[output] = distribution.get(output, 0.0) + source.probability
        paths += 1
        if paths > max_paths:
            raise EnumerationBudgetExceeded(f"more than {max_paths:,} execution paths")
        if max_seconds is not None and time.process_time() - started > max_seconds:
            raise EnumerationBudgetExceeded(
                f"over {max_seconds:g} s of CPU time ({paths:,} paths so far)"
            )
        # Odometer: advance the deepest choice point that still has an untried option.
        widths = source.widths
        depth = len(widths) - 1
        while depth >= 0 and choices[depth] + 1 >= widths[depth]:
            depth -= 1
        if depth < 0:
            break
        del choices[depth + 1 :]
        del recorded[depth + 1 :]
        choices[depth] += 1
    result = Enumeration(distribution, paths)
    if abs(result.total_probability - 1.0) > total_tolerance:
        raise EnumerationError(
            f"path probabilities sum to {result.total_probability:.15f}, not 1 (tolerance "
            f"{total_tolerance:g}): the program is not a deterministic function of its choices"
        )
    return result
