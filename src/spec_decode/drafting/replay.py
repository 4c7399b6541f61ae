"""A planner's run on a known greedy answer, without a model: what it would draft, step by step,
and what that would cost on a cost curve.

Greedy decoding emits the same tokens whatever is drafted (every path is exact), so once the
target-only answer to a prompt is known, a step that verifies a proposal x_1..x_k emits the
answer's next m + 1 tokens, m being how many of x_1..x_k equal them: exactly what
:func:`~spec_decode.core.steps.greedy_step` computes with the target in the loop. Replaying
the planner over the answer gives its trace in milliseconds, so planners and curves can be
compared on real answers deterministically, and the oracle (a drafter that proposes the answer
itself) bounds what any planner could reach on that curve.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache

from spec_decode.core.checks import leading_matches
from spec_decode.core.protocols import DeterministicDrafter, Planner
from spec_decode.core.trace import Step, Trace
from spec_decode.drafting.costs import CostCurve


def replay_greedy(
    planner: Planner, prompt: Sequence[int], answer: Sequence[int], k_max: int
) -> Trace:
    """The trace ``planner`` would produce decoding ``answer`` (the target's greedy answer to
    ``prompt``) with at most ``k_max`` drafted tokens a step. Only deterministic drafters' plans
    can be replayed: a plan naming another drafter raises ValueError."""
    trace = Trace()
    while len(trace.tokens) < len(answer):
        done = len(trace.tokens)
        context = [*prompt, *trace.tokens]
        plan = planner.plan(context, trace, min(k_max, len(answer) - done - 1))
        drafted: Sequence[int] = ()
        if plan.k:
            if plan.drafter not in plan.proposals:
                raise ValueError(f"{plan.drafter!r} is not a deterministic drafter's plan")
            drafted = plan.proposals[plan.drafter][: plan.k]
        accepted = leading_matches(drafted, answer[done : done + len(drafted)])
        trace.record(
            Step(
                list(answer[done : done + accepted + 1]),
                drafted=len(drafted),
                accepted=accepted,
                drafter=plan.drafter if drafted else "",
                proposals=plan.proposals,
            )
        )
    return trace


def passes_cost(trace: Trace, costs: CostCurve) -> float:
    """The trace's target passes in one-token passes on ``costs``: the sum over steps of
    cost(drafted + 1) / cost(1) (draft-model calls are not counted: replays draft by copying)."""
    return sum(costs.relative(drafted + 1) for drafted in trace.drafted_lengths)


def oracle_cost(n_tokens: int, costs: CostCurve, longest: int) -> float:
    """The fewest one-token passes on ``costs`` that emit ``n_tokens`` tokens when every draft is
    right: blocks of at most ``longest`` tokens (k + 1), chosen by dynamic programming."""

    @cache
    def best(remaining: int) -> float:
        if remaining <= 0:
            return 0.0
        return min(
            costs.relative(size) + best(remaining - size)
            for size in range(1, min(longest, remaining) + 1)
        )

    for n in range(n_tokens + 1):  # bottom-up, so the recursion stays shallow
        best(n)
    return best(n_tokens)


def hindsight_cost(
    drafters: Mapping[str, DeterministicDrafter],
    prompt: Sequence[int],
    answer: Sequence[int],
    costs: CostCurve,
    k_max: int,
) -> float:
    """The fewest one-token passes on ``costs`` in which any planner choosing among these
    deterministic ``drafters`` (at most ``k_max`` tokens a step) could emit ``answer``: each step
    knowing, with hindsight, which proposal and length pay. Between what a planner reaches and
    :func:`oracle_cost` (every draft right), this says how much is lost to estimating and how
    much to what the drafters can propose."""
    n = len(answer)
    best = [0.0] * (n + 1)
    for done in range(n - 1, -1, -1):
        context = [*prompt, *answer[:done]]
        cheapest = 1.0 + best[done + 1]
        for drafter in drafters.values():
            proposal = drafter.propose_tokens(context, min(k_max, n - done - 1))
            matched = leading_matches(proposal, answer[done : done + len(proposal)])
            for k in range(1, len(proposal) + 1):
                emitted = min(k, matched) + 1
                cheapest = min(cheapest, costs.relative(k + 1) + best[done + emitted])
        best[done] = cheapest
    return best[0]
