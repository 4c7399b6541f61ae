"""The running requests' recent steps, posted for their neighbours' planners.

Requests on different slots are scored together, one call per step
(:mod:`spec_decode.backends.llamacpp.slots`), so each request's auto planner prices its block on
the whole call (:mod:`spec_decode.drafting.neighbours`). This board is where it reads what the
others add: every running request posts the rows of its last few steps here, and is taken to
be reading its prompt until its first step ends.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Iterator

from spec_decode.core.randomness import RandomSource
from spec_decode.core.steps import StepFunction
from spec_decode.core.trace import Step, Trace
from spec_decode.drafting.neighbours import Neighbours

#: Steps of each request that its neighbours' estimate reads.
WINDOW = 4


class StepBoard:
    """What each running request fed its last steps, by key (its slot)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[int, deque[int]] = {}  # the rows of each request's last WINDOW steps

    @contextlib.contextmanager
    def running(self, key: int) -> Iterator[None]:
        """The request on slot ``key`` is on the board while the block runs."""
        with self._lock:
            self._rows[key] = deque(maxlen=WINDOW)
        try:
            yield
        finally:
            with self._lock:
                del self._rows[key]

    def posting(self, key: int, step: StepFunction) -> StepFunction:
        """``step``, posting the rows of each of its steps under ``key``."""

        def posted(context: list[int], remaining: int, trace: Trace, source: RandomSource) -> Step:
            done = step(context, remaining, trace, source)
            with self._lock:
                self._rows[key].append(done.drafted + 1)
            return done

        return posted

    def neighbours(self, key: int) -> Neighbours:
        """The requests other than ``key``: each one's mean rows a step (1 before its first
        step ends), and whether one of them has not finished a step yet (it reads its
        prompt)."""
        with self._lock:
            others = [list(rows) for other, rows in self._rows.items() if other != key]
        rows = tuple(round(sum(r) / len(r)) if r else 1 for r in others)
        return Neighbours(rows, reading_prompt=not all(others))
