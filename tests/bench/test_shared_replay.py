"""The shared-call replay (bench/lib/shared_replay.py): every answer is emitted whole, target-only
takes one call per token once the prompts are read, the calls never hold more rows than the
server's budget, and hindsight is never behind the planner on answers that copy their prompts."""

from __future__ import annotations

import pytest

from spec_decode.drafting.costs import CostCurve

#: A CPU-like curve: rows cost far less each in a call of many.
CURVE = CostCurve((1, 2, 4, 8, 16, 64), (0.03, 0.05, 0.08, 0.13, 0.16, 0.45))


@pytest.fixture
def shared(bench_module):
    return bench_module("bench.lib.shared_replay")


def copying_cases(n: int) -> list[tuple[list[int], list[int]]]:
    """Requests whose answers copy a stretch of their prompt, then make up new tokens."""
    cases = []
    for i in range(n):
        text = [(7 * i + 3 * j) % 61 for j in range(40)]
        cases.append((text, text[10:34] + [61 + (i + j) % 3 for j in range(8)]))
    return cases


def test_target_only_makes_one_call_per_token_after_the_prompts(shared):
    cases = copying_cases(3)
    alone = shared.replay_shared(cases, 1, CURVE, "target-only", 16, 64)
    # each prompt in one call (its last row scores the first token), then a call a token
    assert alone.tokens == sum(len(answer) for _, answer in cases)
    assert alone.calls == sum(len(answer) for _, answer in cases)
    together = shared.replay_shared(cases, 3, CURVE, "target-only", 16, 64)
    assert together.tokens == alone.tokens and together.calls < alone.calls


@pytest.mark.parametrize("clients", [1, 2, 4])
def test_hindsight_is_never_behind_the_planner_and_copying_pays(shared, clients):
    cases = copying_cases(4)
    rates = {
        plan: shared.replay_shared(cases, clients, CURVE, plan, 16, 64).rate
        for plan in shared.PLANS
    }
    assert rates["hindsight"] >= rates["planner"] - 1e-9
    assert rates["hindsight"] > rates["target-only"]


def test_an_unknown_plan_is_refused(shared):
    with pytest.raises(ValueError, match="plan must be one of"):
        shared.replay_shared(copying_cases(1), 1, CURVE, "oracle", 16, 64)
