"""The auto planner's risk budget: whatever its estimates, an answer is never more than ``risk``
slower than target-only decoding on the curve. An adversary that lets every copy run right until
the planner bets on it, then breaks it at the first drafted token, costs the budgeted planner at
most its risk; without the budget (the negative control) it costs far more."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from auto_helpers import CPU

from spec_decode.core.checks import leading_matches
from spec_decode.core.trace import Step, Trace
from spec_decode.drafting.auto import RISK, AutoPlanner, auto_planner

VOCAB = 64
PROMPT = list(range(10)) * 4  # every drafter proposes the cycle's next tokens
TOKENS = 200


def budgeted(risk: float) -> AutoPlanner:
    return replace(auto_planner(CPU, VOCAB, k_max=16), risk=risk)


def decode(planner: AutoPlanner, adversarial: bool) -> tuple[Trace, list[float]]:
    """``TOKENS`` tokens planned by ``planner``, the answer going on round the prompt's cycle,
    except that, ``adversarial``, it breaks from a drafted block at its first token. Returns the
    trace and, after each step, its cost over target-only decoding's (the prompt read in one
    call, then a pass a token) on the curve."""
    trace, ratios = Trace(), []
    prompt_passes = CPU.relative(len(PROMPT))
    while len(trace.tokens) < TOKENS:
        context = [*PROMPT, *trace.tokens]
        plan = planner.plan(context, trace, min(16, TOKENS - len(trace.tokens) - 1))
        drafted = plan.proposals.get(plan.drafter, [])[: plan.k]
        if plan.k and adversarial:
            emitted, accepted = [(drafted[0] + 1) % 10], 0
        else:
            cycle = [(context[-1] + i) % 10 for i in range(1, plan.k + 2)]
            accepted = leading_matches(drafted, cycle)
            emitted = cycle[: accepted + 1]
        step = Step(emitted, plan.k, accepted, drafter=plan.drafter, proposals=plan.proposals)
        trace.record(step)
        spent = CPU.passes(trace.drafted_lengths) + prompt_passes
        ratios.append(spent / (len(trace.tokens) + prompt_passes))
    return trace, ratios


@pytest.mark.parametrize("risk", [RISK, 0.1])
def test_every_bet_failing_costs_at_most_the_risk(risk):
    trace, ratios = decode(budgeted(risk), adversarial=True)
    assert sum(trace.drafted_lengths) > 0  # it did bet, and lost every time
    assert trace.accepted == 0
    assert max(ratios) <= 1 + risk + 1e-9


def test_without_the_budget_the_adversary_costs_far_more():  # the negative control
    _, ratios = decode(budgeted(math.inf), adversarial=True)
    assert ratios[-1] > 1 + 2 * RISK


def test_blocks_grow_with_what_earlier_blocks_earned():
    trace, ratios = decode(budgeted(RISK), adversarial=False)
    blocks = [k for k in trace.drafted_lengths if k]
    assert blocks[0] <= 2  # a first bet is short
    assert max(blocks) == 16  # and a copy that keeps paying reaches the longest block
    _, unbudgeted = decode(budgeted(math.inf), adversarial=False)
    assert ratios[-1] < unbudgeted[-1] + 0.05  # what the ramp costs a copy that pays


def test_a_negative_risk_is_refused():
    with pytest.raises(ValueError, match="risk"):
        budgeted(-0.01)
