"""Policies that choose how many tokens to draft before each step.

A policy is consulted with the :class:`~spec_decode.speculative.Trace` so far and returns k >= 1.
Reading its state from the trace (not from hidden attributes) keeps a run reproducible and lets
the exhaustive certificate re-run it down every branch. Exactness never depends on the policy:
the rule is exact for any k chosen from the past.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from spec_decode.speculative import Trace


class KPolicy(Protocol):
    """Chooses the number of tokens to draft next."""

    def next_k(self, trace: Trace) -> int: ...


@dataclass(frozen=True)
class FixedK:
    """Always draft ``k`` tokens."""

    k: int

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")

    def next_k(self, trace: Trace) -> int:
        return self.k
