"""What a generation run emitted and what it cost: one :class:`Step` per target pass, one
:class:`Trace` per run, for chains, trees and target-only decoding alike.

This is where cost is counted. Every figure the project reports (target passes, draft calls,
acceptance rate, tokens per pass, modelled speedup) is derived from the per-step records here, so
there is exactly one definition of each.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np


@dataclass(frozen=True)
class Step:
    """One target pass: the tokens it emitted and what it cost.

    ``drafted`` counts the drafted tokens the target scored (a chain's length or a tree's size),
    ``accepted`` how many of them were kept (bonus and residual tokens are not counted), and
    ``draft_calls`` the draft forward calls spent (one per drafted chain token; one per tree
    position whose children were drafted, since siblings share one draft distribution).
    ``drafter`` names the drafter whose tokens were verified ("" when nothing was drafted), so
    a policy choosing among several drafters can estimate each one's acceptance from the trace.
    ``proposals`` holds what deterministic drafters would have proposed at the step's start
    (by name, whether used or not): compared with the tokens emitted afterwards, it tells how
    many of them the target would have accepted (see :mod:`spec_decode.drafting.auto`).
    """

    emitted: list[int]
    drafted: int = 0
    accepted: int = 0
    draft_calls: int = 0
    draft_seconds: float = 0.0
    target_seconds: float = 0.0
    drafter: str = ""
    proposals: Mapping[str, Sequence[int]] = field(default_factory=dict)

    def cut_at_stop(self, stop_tokens: Collection[int]) -> Step:
        """This step with everything after its first stop token removed."""
        cut = next((i for i, t in enumerate(self.emitted) if t in stop_tokens), None)
        if cut is None:
            return self
        return replace(self, emitted=self.emitted[: cut + 1], accepted=min(self.accepted, cut + 1))


@dataclass
class Trace:
    """What a generation run emitted and what it cost, step by step (one target pass each)."""

    tokens: list[int] = field(default_factory=list)
    drafted_lengths: list[int] = field(default_factory=list)
    accepted_lengths: list[int] = field(default_factory=list)
    draft_call_counts: list[int] = field(default_factory=list)
    drafter_names: list[str] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    proposals: list[Mapping[str, Sequence[int]]] = field(default_factory=list)
    draft_seconds: float = 0.0
    target_seconds: float = 0.0

    @property
    def target_passes(self) -> int:
        """Target forward passes: one per step."""
        return len(self.drafted_lengths)

    @property
    def proposed(self) -> int:
        """Drafted tokens, over all steps."""
        return sum(self.drafted_lengths)

    @property
    def accepted(self) -> int:
        """Drafted tokens that were kept, over all steps."""
        return sum(self.accepted_lengths)

    @property
    def draft_calls(self) -> int:
        """Draft forward calls, over all steps."""
        return sum(self.draft_call_counts)

    @property
    def acceptance_rate(self) -> float:
        """accepted / proposed drafted tokens; NaN when nothing was drafted."""
        return self.accepted / self.proposed if self.proposed else float("nan")

    @property
    def tokens_per_pass(self) -> float:
        """Emitted tokens per target forward pass (1.0 for target-only decoding)."""
        return len(self.tokens) / self.target_passes if self.target_passes else float("nan")

    @property
    def acceptance_histogram(self) -> np.ndarray:
        """``histogram[j]`` = number of steps that accepted exactly j drafted tokens."""
        return np.bincount(np.asarray(self.accepted_lengths, dtype=int))

    def record(self, step: Step) -> None:
        """Add one step's outcome."""
        self.drafted_lengths.append(step.drafted)
        self.accepted_lengths.append(step.accepted)
        self.draft_call_counts.append(step.draft_calls)
        self.drafter_names.append(step.drafter)
        self.starts.append(len(self.tokens))
        self.proposals.append(step.proposals)
        self.tokens.extend(step.emitted)
        self.draft_seconds += step.draft_seconds
        self.target_seconds += step.target_seconds

    def speedup(self, draft_cost: float) -> float:
        """Speedup over target-only decoding when a draft call costs ``draft_cost`` target passes.

        Cost model: tokens / (target_passes + draft_cost * draft_calls); target-only decoding
        pays one pass per token.
        """
        return len(self.tokens) / (self.target_passes + draft_cost * self.draft_calls)
