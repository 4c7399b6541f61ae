"""Policies that choose how many tokens to draft before each step.

A policy is consulted with the :class:`~spec_decode.core.trace.Trace` so far and returns k >= 0
(0: a plain target pass). Reading its state from the trace (not from hidden attributes) keeps a
run reproducible and lets the exhaustive certificate re-run it down every branch. Exactness never
depends on the policy: the rule is exact for any k chosen from the past.

Three policies ship: :class:`FixedK`; :class:`ScheduleK`, the grow-on-success, shrink-on-rejection
schedule of Hugging Face's dynamic assistant tokens; and :class:`CostModelK`, which picks the k
that maximises expected tokens per unit cost at a running estimate of the acceptance rate. A
draft-confidence cut-off acts inside drafting, so it is a drafter option
(``ModelDrafter.min_confidence``), not a policy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from spec_decode.core.protocols import KPolicy
from spec_decode.core.trace import Trace


def expected_tokens_per_pass(alpha: float, k: int) -> float:
    """(1 - alpha^(k+1)) / (1 - alpha): tokens per target pass at constant acceptance ``alpha``."""
    if alpha >= 1:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def expected_speedup(alpha: float, k: int, draft_cost: float) -> float:
    """Tokens per unit cost relative to target-only decoding, a draft call costing ``draft_cost``.

    (1 - alpha^(k+1)) / ((1 - alpha)(draft_cost * k + 1)).
    """
    return expected_tokens_per_pass(alpha, k) / (draft_cost * k + 1)


def optimal_k(alpha: float, draft_cost: float, k_max: int = 64) -> int:
    """The k in 1..k_max that maximises :func:`expected_speedup`."""
    return max(range(1, k_max + 1), key=lambda k: expected_speedup(alpha, k, draft_cost))


@dataclass(frozen=True)
class FixedK:
    """Always draft ``k`` tokens."""

    k: int

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")

    def next_k(self, trace: Trace) -> int:
        return self.k


@dataclass(frozen=True)
class ScheduleK:
    """Grow k by ``grow`` after a step that kept all its drafts, shrink it by ``shrink`` after a
    rejection, within [``k_min``, ``k_max``], starting from ``initial``.

    This is the heuristic schedule of Hugging Face's dynamic assistant tokens. The current k is
    derived by replaying the whole history of the trace (steps that drafted nothing carry no
    evidence and leave k unchanged), so the policy holds no state of its own.
    """

    initial: int = 4
    k_min: int = 1
    k_max: int = 16
    grow: int = 2
    shrink: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.k_min <= self.initial <= self.k_max:
            raise ValueError(
                f"need 1 <= k_min <= initial <= k_max, got k_min={self.k_min}, "
                f"initial={self.initial}, k_max={self.k_max}"
            )
        if self.grow < 0 or self.shrink < 0:
            raise ValueError(f"grow and shrink must be >= 0, got {self.grow} and {self.shrink}")

    def next_k(self, trace: Trace) -> int:
        k = self.initial
        for drafted, accepted in zip(trace.drafted_lengths, trace.accepted_lengths, strict=True):
            if drafted == 0:
                continue
            if accepted == drafted:
                k = min(k + self.grow, self.k_max)
            else:
                k = max(k - self.shrink, self.k_min)
        return k


def estimated_alpha(
    trace: Trace,
    prior_alpha: float,
    prior_weight: float,
    drafter: str | None = None,
    last_steps: int | None = None,
) -> float:
    """Posterior mean of the per-token acceptance probability, from a Beta prior and the trace.

    Within a step, drafted tokens are tried in order until the first rejection, so a step that
    accepted a of its d drafts holds a successes and one failure when a < d; drafts after the
    first rejection were never tried. (accepted / proposed would count them as failures and
    underestimate alpha.) The prior counts as ``prior_weight`` trials at rate ``prior_alpha``.
    ``drafter`` keeps only the steps that drafter drafted (by its name in the trace);
    ``last_steps`` only the most recent steps, so old evidence expires.
    """
    names = trace.drafter_names if drafter is not None else [None] * trace.target_passes
    steps = list(zip(trace.drafted_lengths, trace.accepted_lengths, names, strict=True))
    if last_steps is not None:
        steps = steps[len(steps) - last_steps :] if last_steps else []
    accepted = trials = 0
    for drafted, kept, name in steps:
        if drafted and name == drafter:
            accepted += kept
            trials += kept + (kept < drafted)
    return (accepted + prior_alpha * prior_weight) / (trials + prior_weight)


def measured_draft_cost(trace: Trace) -> float:
    """Seconds per draft call over seconds per target pass, as measured so far; NaN before both
    have been observed."""
    if trace.draft_calls == 0 or trace.target_seconds <= 0:
        return math.nan
    return (trace.draft_seconds / trace.draft_calls) / (trace.target_seconds / trace.target_passes)


@dataclass(frozen=True)
class CostModelK:
    """Draft the k that maximises expected tokens per unit cost at the estimated acceptance rate.

    Before each step, alpha is :func:`estimated_alpha` of the trace and the draft/target cost
    ratio is ``draft_cost`` when given, otherwise :func:`measured_draft_cost`; the policy returns
    :func:`optimal_k` of the two, capped at ``k_max``. A measured ratio makes
    runs depend on the clock, so certificates and reproducible benchmarks give ``draft_cost``.
    Until a ratio can be measured (no draft call timed yet) the policy drafts ``initial`` tokens.
    The model assumes a target pass costs the same whatever the block length.
    """

    k_max: int = 16
    draft_cost: float | None = None
    prior_alpha: float = 0.5
    prior_weight: float = 2.0
    initial: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.initial <= self.k_max:
            raise ValueError(
                f"need 1 <= initial <= k_max, got initial={self.initial}, k_max={self.k_max}"
            )
        if self.draft_cost is not None and not self.draft_cost >= 0:
            raise ValueError(f"draft_cost must be >= 0 (or None to measure), got {self.draft_cost}")
        if not 0 <= self.prior_alpha <= 1:
            raise ValueError(f"prior_alpha must lie in [0, 1], got {self.prior_alpha}")
        if not self.prior_weight > 0:
            raise ValueError(f"prior_weight must be > 0, got {self.prior_weight}")

    def next_k(self, trace: Trace) -> int:
        cost = self.draft_cost if self.draft_cost is not None else measured_draft_cost(trace)
        if math.isnan(cost):
            return self.initial
        alpha = estimated_alpha(trace, self.prior_alpha, self.prior_weight)
        return optimal_k(alpha, cost, self.k_max)


def as_policy(k: int | KPolicy) -> KPolicy:
    """The k policy that ``k`` stands for: an int k >= 1 is :class:`FixedK`, a policy is itself.

    The one place where a number of drafts becomes a policy (library, CLI and engine alike).
    """
    return FixedK(int(k)) if isinstance(k, int | np.integer) else k


#: The names :func:`policy_by_name` accepts.
POLICY_NAMES = ("fixed", "schedule", "cost")


def policy_by_name(name: str, k: int, k_max: int = 16, draft_cost: float | None = None) -> KPolicy:
    """The policy called ``name``, for the command line and for sweeps.

    ``k`` is the fixed k, or where an adaptive policy starts; ``k_max`` caps the adaptive ones;
    ``draft_cost`` is the cost policy's draft/target cost ratio (``None``: measure it).
    """
    if name == "fixed":
        return FixedK(k)
    if name == "schedule":
        return ScheduleK(initial=k, k_max=k_max)
    if name == "cost":
        return CostModelK(k_max=k_max, draft_cost=draft_cost, initial=k)
    raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")
