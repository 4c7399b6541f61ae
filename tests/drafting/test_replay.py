"""The replay of a planner on a known greedy answer (:mod:`spec_decode.drafting.replay`) is what
greedy decoding with the target in the loop does, step for step; and the oracle bound."""

from __future__ import annotations

import numpy as np
import pytest

from spec_decode import SamplingParams, random_markov
from spec_decode.core.generate import generate
from spec_decode.drafting.auto import auto_planner
from spec_decode.drafting.costs import CostCurve
from spec_decode.drafting.replay import oracle_cost, passes_cost, replay_greedy
from spec_decode.drafting.rule_choice import rule_by_name

#: Steep like a CPU's: a 16-token block costs 6 one-token passes.
CURVE = CostCurve((1, 2, 8, 16, 32), (0.01, 0.019, 0.045, 0.06, 0.11))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_replay_is_the_greedy_run_step_for_step(seed):
    target = random_markov(12, seed=seed, order=2)  # greedy text soon repeats: lookup copies
    prompt = [0, 1, 2, 3]
    planner = auto_planner(CURVE, target.vocab_size, k_max=31)
    step = rule_by_name("coupled").planned_step(
        target, planner.drafters, planner, SamplingParams(temperature=0)
    )
    run = generate(target, step, prompt, 120, np.random.default_rng(seed))
    replayed = replay_greedy(planner, prompt, run.tokens, k_max=31)
    assert replayed.tokens == run.tokens
    assert replayed.drafted_lengths == run.drafted_lengths
    assert replayed.accepted_lengths == run.accepted_lengths
    assert replayed.proposed > 0  # the case drafts at all
    assert passes_cost(replayed, CURVE) >= oracle_cost(len(run.tokens), CURVE, 32)


def test_the_oracle_takes_the_cheapest_blocks():
    # 33 tokens: one 32-token block and one token (11 + 1 passes) beat two 16-token blocks and
    # one (6 + 6 + 1); with blocks of at most 16, the latter is the best
    assert oracle_cost(33, CURVE, 32) == pytest.approx(12.0)
    assert oracle_cost(33, CURVE, 16) == pytest.approx(13.0)
    assert oracle_cost(0, CURVE, 16) == 0.0


def test_only_deterministic_plans_replay():
    class Modelled:
        vocab_size = 12

        def plan(self, context, trace, k_max):
            from spec_decode.core.protocols import Plan

            return Plan("draft", 2)

    with pytest.raises(ValueError, match="deterministic"):
        replay_greedy(Modelled(), [0, 1], [2, 3, 4, 5], k_max=4)
