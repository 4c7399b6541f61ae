"""The running requests' offers for the next shared call, posted for each other's planners.

Requests on different slots are scored together, one call per step
(:mod:`spec_decode.backends.llamacpp.slots`), so their auto planners choose their blocks together
(:mod:`spec_decode.drafting.shared_call`). This board is where they meet: an auto planner posts
its offer before each step and reads everyone's; a request planned otherwise (target-only, a
fixed k) offers the mean rows of its last few steps. A request is taken to be reading its prompt
until its first step ends.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from spec_decode.core.randomness import RandomSource
from spec_decode.core.steps import StepFunction
from spec_decode.core.trace import Step, Trace
from spec_decode.drafting.shared_call import Offer, SharedCall, fixed

#: Steps of each request that its fixed offer is the mean of.
WINDOW = 4


@dataclass
class _Entry:
    """What a running request posted: the rows of its last steps, and its last offer."""

    rows: deque[int] = field(default_factory=lambda: deque(maxlen=WINDOW))
    offer: Offer | None = None

    @property
    def current(self) -> Offer:
        if self.offer is not None:
            return self.offer
        return fixed(round(sum(self.rows) / len(self.rows)) if self.rows else 1)


class StepBoard:
    """What each running request posted, by key (its slot); ``budget`` is the most rows one
    call holds (None: no bound), ``one_pass`` whether a call is one pass whatever its rows."""

    def __init__(self, budget: int | None = None, one_pass: bool = False) -> None:
        self.budget, self.one_pass = budget, one_pass
        self._lock = threading.Lock()
        self._entries: dict[int, _Entry] = {}

    @contextlib.contextmanager
    def running(self, key: int) -> Iterator[None]:
        """The request on slot ``key`` is on the board while the block runs."""
        with self._lock:
            self._entries[key] = _Entry()
        try:
            yield
        finally:
            with self._lock:
                del self._entries[key]

    def posting(self, key: int, step: StepFunction) -> StepFunction:
        """``step``, posting the rows of each of its steps under ``key``."""

        def posted(context: list[int], remaining: int, trace: Trace, source: RandomSource) -> Step:
            done = step(context, remaining, trace, source)
            with self._lock:
                self._entries[key].rows.append(done.drafted + 1)
            return done

        return posted

    def share(self, key: int, offer: Offer) -> SharedCall:
        """Post ``offer`` for the request on slot ``key``; every running request's offer, by
        key (a slot's key is its sequence id), and whether one of them has not finished a step
        yet (it reads its prompt)."""
        with self._lock:
            self._entries[key].offer = offer
            keys = sorted(self._entries)
            offers = tuple(self._entries[k].current for k in keys)
            reading = not all(self._entries[k].rows for k in keys if k != key)
        return SharedCall(offers, keys.index(key), reading, self.budget, tuple(keys), self.one_pass)
