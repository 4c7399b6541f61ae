"""The one step dispatcher (:func:`spec_decode.serving.steps.request_step`): every case it
chooses, target-only, a chain, a token tree and the auto policy, run under the coupled rule,
emits target-only decoding's tokens for a seed (what ``generate --compare`` prints)."""

from __future__ import annotations

from spec_decode import SamplingParams, draft_from_target, random_markov
from spec_decode.core.generate import generate
from spec_decode.core.tree import TreeShape
from spec_decode.drafting.auto import auto_planner
from spec_decode.drafting.costs import CostCurve
from spec_decode.serving.config import EngineConfig
from spec_decode.serving.request import RequestOptions
from spec_decode.serving.steps import request_step


def test_each_case_under_the_coupled_rule_emits_target_only_tokens():
    target = random_markov(16, seed=1)
    draft = draft_from_target(target, 0.6, seed=2)
    costs = CostCurve((1, 17), (0.010, 0.010), 0.001)  # a curve on which auto drafts
    options = RequestOptions(SamplingParams(0.7), rule="coupled")
    only = RequestOptions(SamplingParams(0.7), rule="coupled", target_only=True)

    def auto(model):
        return auto_planner(costs, 16, model, 4)

    cases = [
        (EngineConfig(draft="d"), only),
        (EngineConfig(draft="d", policy="fixed"), options),
        (EngineConfig(draft="d", tree=TreeShape((2, 2))), options),
        (EngineConfig(draft="d"), options),
    ]
    steps = [request_step(config, o, target, draft, 3, auto) for config, o in cases]
    choice = cases[0][0].rule_for(options)
    for seed in range(5):
        runs = [generate(target, step, [0], 30, choice.source(seed)) for step in steps]
        assert all(run.tokens == runs[0].tokens for run in runs)
        assert all(run.accepted > 0 for run in runs[1:])


def test_a_request_names_its_rule_else_the_engine_does():
    config = EngineConfig(rule="standard")
    assert not config.rule_for(RequestOptions()).coupled
    assert config.rule_for(RequestOptions(rule="coupled")).coupled
