"""Ending a generation early: once a stop string appeared in its text or its caller cancelled,
checked before every step, with the trace so far kept."""

from __future__ import annotations

from collections.abc import Callable

from spec_decode.core.randomness import RandomSource
from spec_decode.core.steps import StepFunction
from spec_decode.core.trace import Step, Trace
from spec_decode.serving.text import IncrementalText


class Halt(Exception):
    """Raised by a step to end a generation early, carrying the trace so far."""

    def __init__(self, trace: Trace, reason: str) -> None:
        super().__init__(reason)
        self.trace, self.reason = trace, reason


def halt_reason(text: IncrementalText, cancelled: Callable[[], bool] | None) -> str | None:
    """Why the next step must not run: a stop string appeared, or the caller cancelled."""
    if text.stopped:
        return "stop"
    if cancelled is not None and cancelled():
        return "cancelled"
    return None


def halting_step(step: StepFunction, reason: Callable[[], str | None]) -> StepFunction:
    """``step``, refusing to run (raising :class:`Halt` with the trace so far) once
    ``reason`` names one."""

    def halting(context: list[int], remaining: int, trace: Trace, source: RandomSource) -> Step:
        why = reason()
        if why is not None:
            raise Halt(trace, why)
        return step(context, remaining, trace, source)

    return halting
