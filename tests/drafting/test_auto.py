"""The auto policy: its choices on hand-built traces and cost curves, and its exactness
(exhaustive on toy models with a fixed curve, and a seeded statistical test), with a broken
variant (a deterministic drafter reporting a model's q) that must FAIL."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from auto_helpers import CPU, FLAT, FRESH, REPEATING, history, planner, watched

from spec_decode import SamplingParams, Trace, draft_from_target, random_markov
from spec_decode.certify.exhaustive import exact_distribution
from spec_decode.certify.goodness_of_fit import samples_for_power
from spec_decode.certify.statistical import statistical_certificate
from spec_decode.core.generate import generate
from spec_decode.core.models import Model
from spec_decode.core.protocols import Drafter
from spec_decode.core.trace import Step
from spec_decode.drafting.auto import (
    LONG_MATCH,
    AutoPlanner,
    auto_planner,
)
from spec_decode.drafting.copy_survival import copy_survival
from spec_decode.drafting.costs import CostCurve
from spec_decode.drafting.drafters import ModelDrafter
from spec_decode.drafting.lookup import PromptLookupDrafter
from spec_decode.drafting.policies import estimated_alpha
from spec_decode.drafting.rule_choice import rule_by_name
from spec_decode.drafting.suffix import SuffixDrafter, SuffixHistory

TOLERANCE = 1e-12
STANDARD = rule_by_name("standard")


def test_a_repeated_request_is_drafted_from_the_shared_history():
    target = random_markov(50, seed=3, order=2)  # greedy text enters a cycle only late
    greedy, prompt, shared = SamplingParams(temperature=0), [0, 1, 2, 3], SuffixHistory()
    passes, outputs = [], []
    for _ in range(2):
        auto = auto_planner(FLAT, target.vocab_size, k_max=8, history=shared)
        step = STANDARD.planned_step(target, auto.drafters, auto, greedy)
        trace = generate(target, step, prompt, 40, np.random.default_rng(0))
        shared.add([*prompt, *trace.tokens])
        passes.append(trace.target_passes)
        outputs.append(trace.tokens)
    assert outputs[0] == outputs[1]  # greedy: the same text, now drafted from the history
    assert passes[0] == 40 and passes[1] <= 8


def test_the_first_step_asks_no_drafter():  # indexing a long prompt would delay the first token
    class Refusing(PromptLookupDrafter):
        def propose_tokens(self, prefix, k):
            raise AssertionError("a drafter was asked before the first token")

    assert AutoPlanner(CPU, {"lookup": Refusing(8)}).plan(REPEATING, Trace(), 16) == ("", 0, {})


def test_free_proposals_are_judged_by_what_was_emitted_since():
    auto = planner(CPU)
    plan = auto.plan(REPEATING, history(("", 0, 0)), 16)
    assert plan[:2] == ("", 0)  # prior 0.5: no draft pays by the margin before any evidence
    assert plan.proposals == {"lookup": [3, 1, 2], "suffix": [3, 1, 2]}
    right = watched([1, 2, 3] * 10, 3, right=True)
    assert auto.plan(REPEATING, right, 16)[:2] == ("lookup", 3)  # both propose "3 1 2"
    wrong = watched([1, 2, 3] * 10, 3, right=False)
    assert auto.plan(REPEATING, wrong, 16)[:2] == ("", 0)
    assert auto.plan(FRESH, right, 16)[:2] == ("", 0)  # nothing to propose: plain pass


def beta_rate(right: int, seen: int, prior: float, weight: float = 2.0) -> float:
    return (right + weight * prior) / (seen + weight)


def test_copy_survival_counts_each_token_at_the_streak_it_was_reached_with():
    trace = Trace()
    trace.record(Step([4], proposals={"lookup": [4, 5, 6]}))  # then 5, then 9: 2 hits, 1 miss
    trace.record(Step([5, 9]))
    trace.record(Step([1], proposals={"lookup": [1, 2]}))  # 1 hit, then 3: 1 miss
    trace.record(Step([3], proposals={"lookup": [7, 8]}))  # its 7 met a token judged already
    # by streak: 4 at 0 (right), 5 at 1 (right), 9 at 2 (wrong), 1 at 0 (right), 3 at 1 (wrong):
    # streak 0: 2 of 2 right, streaks 1-2: 1 of 3 right
    zero = beta_rate(2, 2, 0.5)
    low = beta_rate(1, 3, zero)
    higher = beta_rate(0, 0, low)  # no tokens seen at longer streaks: the bucket below's rate
    # the streak now is 0 (the last token, 3, was not predicted): h(0) h(1) h(2) h(3)
    assert copy_survival(trace, "lookup", 4, 0.5, 2.0, 32, caution=0) == pytest.approx(
        [zero, zero * low, zero * low * low, zero * low * low * higher]
    )
    assert copy_survival(trace, "suffix", 2, 0.5, 2.0, 32, caution=0) == [0.5, 0.25]


def test_each_emitted_token_counts_once():
    """Overlapping proposals of one copy (the same text shifted by a token) judge each emitted
    token once, for the first proposal that reached it."""
    trace = Trace()
    for token, proposal in ((1, [1, 2, 3]), (2, [2, 3, 4]), (3, [3, 4, 5]), (4, [])):
        trace.record(Step([token], proposals={"lookup": proposal} if proposal else {}))
    # tokens 1, 2, 3 right at streaks 0, 1, 2 by the first proposal, 4 at streak 3 by the second
    zero = beta_rate(1, 1, 0.5)
    low = beta_rate(2, 2, zero)
    now = copy_survival(trace, "lookup", 1, 0.5, 2.0, 32, caution=0)  # streak 4 now
    assert now == pytest.approx([beta_rate(1, 1, low)])


def test_caution_lowers_rates_seen_on_few_tokens_most():
    trace = watched(list(range(10, 20)), 4, right=True)
    bold = copy_survival(trace, "lookup", 4, 0.5, 2.0, 32, caution=0)
    careful = copy_survival(trace, "lookup", 4, 0.5, 2.0, 32, caution=1)
    assert all(c < b for c, b in zip(careful, bold, strict=True))


def test_survival_reaches_past_what_plain_passes_have_shown():
    """32 plain passes through a copy show each proposal's first token only: the estimate, rates
    carried up from shorter streaks, vouches for a 16-token draft."""
    text = list(range(10, 60))
    trace = watched(text[:32], 16, right=True)
    survival = copy_survival(trace, "lookup", 16, 0.5, 2.0, 32)
    assert survival[15] > 0.5


def test_a_copy_that_just_broke_off_is_not_drafted_far():
    """Deep into a copy a 16-token draft is worth it; right after a miss, in text whose copies
    miss at short streaks, it is not."""
    text = list(range(10, 60))
    deep = watched(text[:40], 16, right=True)
    assert copy_survival(deep, "lookup", 16, 0.5, 2.0, 64)[15] > 0.7
    edited = [99 if i % 3 == 2 else token for i, token in enumerate(text)]  # every third changed
    broken = Trace()
    for i, token in enumerate(edited[:40]):
        broken.record(Step([token], proposals={"lookup": text[i : i + 16]}))
    assert copy_survival(broken, "lookup", 16, 0.5, 2.0, 64)[15] < 0.05


def test_a_long_copy_does_not_vouch_for_first_tokens_that_keep_missing():
    """Six proposals wrong from their first token and one 16-token copy: a rate pooled over
    depths (16 of 22) would draft; the survival curve (first token right 1 time in 7) does not."""
    copy = list(range(10, 26))
    trace = Trace()
    trace.record(Step([copy[0]], proposals={"lookup": copy}))
    trace.record(Step(copy[1:]))
    for _ in range(6):
        trace.record(Step([1], proposals={"lookup": [2, 3, 4, 5]}))
    assert auto_plan_on(FLAT_STEEP, trace)[:2] == ("", 0)
    right = Trace()
    for _ in range(6):
        right.record(Step([2], proposals={"lookup": [2, 3, 4, 5]}))
        right.record(Step([3, 4, 5]))
    assert auto_plan_on(FLAT_STEEP, right)[:2] == ("lookup", 4)


#: A pass of 2-5 tokens costs 1.8 one-token passes.
FLAT_STEEP = CostCurve((1, 2, 5), (0.010, 0.018, 0.018))


def auto_plan_on(costs: CostCurve, trace: Trace):
    lookup = PromptLookupDrafter(8, max_ngram=1, max_tokens=4)
    return AutoPlanner(costs, {"lookup": lookup}).plan([1, 2, 3, 4, 5, 1], trace, 16)


def test_the_cap_and_the_last_step_are_respected():
    auto = planner(FLAT, random_markov(8, seed=0), k_max=3)
    assert auto.plan(REPEATING, Trace(), 16).k <= 3
    assert auto.plan(REPEATING, Trace(), 0)[:2] == ("", 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model": "draft"}, "not among"),
        ({"k_max": -1}, "k_max"),
        ({"memory": 0}, "memory"),
        ({"copy_memory": 0}, "copy_memory"),
        ({"margin": -0.1}, "margin"),
        ({"prior_alpha": 1.5}, "prior_alpha"),
    ],
)
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AutoPlanner(CPU, {"lookup": PromptLookupDrafter(8)}, **kwargs)


def test_a_draft_model_needs_a_draft_cost():
    drafters = {"draft": ModelDrafter(random_markov(8, seed=0))}
    with pytest.raises(ValueError, match="draft_seconds"):
        AutoPlanner(CostCurve((1,), (0.01,)), drafters, "draft")


# ---- exactness ---------------------------------------------------------------------------------

SAMPLINGS = {
    "plain": SamplingParams(),
    "temperature 0.7, top-k 2": SamplingParams(temperature=0.7, top_k=2),
    "greedy": SamplingParams(temperature=0),
}
#: A curve on which every option wins somewhere: plain passes, free drafts and the model.
MIXED = CostCurve((1, 2, 3, 4), (0.010, 0.013, 0.016, 0.030), 0.002)


def toy_auto(vocab: int, costs: CostCurve, sampling: SamplingParams) -> tuple[Model, AutoPlanner]:
    target = random_markov(vocab, seed=5)
    draft = draft_from_target(target, 0.5, seed=6)
    drafters: dict[str, Drafter] = {
        "lookup": PromptLookupDrafter(vocab, max_ngram=2, max_tokens=3),
        "suffix": SuffixDrafter(vocab, max_match=3, min_probability=0.3),
        "draft": ModelDrafter(draft, sampling),
    }
    options = {"k_max": 3, "prior_alpha": 0.6, "prior_weight": 1.0, "memory": 3, "margin": 0.0}
    return target, AutoPlanner(costs, drafters, "draft", **options)


def auto_generator(target, auto, prefix, sampling):
    step = STANDARD.planned_step(target, auto.drafters, auto, sampling)
    return lambda rng, n: generate(target, step, prefix, n, rng).tokens


@pytest.mark.slow
@pytest.mark.parametrize("costs", ["CPU", "FLAT", "MIXED"])
@pytest.mark.parametrize("sampling", SAMPLINGS)
@pytest.mark.parametrize(
    ("vocab", "n_tokens", "prefix"), [(2, 6, [0, 1, 1, 0, 1]), (3, 4, [0, 1, 2, 0, 1])]
)
def test_auto_is_exact(costs, sampling, vocab, n_tokens, prefix):
    controls = SAMPLINGS[sampling]
    target, auto = toy_auto(vocab, {"CPU": CPU, "FLAT": FLAT, "MIXED": MIXED}[costs], controls)
    result = exact_distribution(
        auto_generator(target, auto, prefix, controls), target, prefix, n_tokens, controls
    )
    assert abs(result.total_probability - 1) < TOLERANCE
    assert result.tv < TOLERANCE


def test_the_mixed_curve_exercises_every_option():
    target, auto = toy_auto(3, MIXED, SamplingParams())
    step = STANDARD.planned_step(target, auto.drafters, auto, SamplingParams())
    names = set()
    for seed in range(20):
        trace = generate(target, step, [0, 1, 2, 0, 1], 12, np.random.default_rng(seed))
        names |= set(trace.drafter_names)  # "" marks a plain pass
    assert names == {"", "lookup", "suffix", "draft"}


def test_auto_with_a_drafter_reporting_a_model_q_fails(reports_model_q):
    target, honest = toy_auto(3, MIXED, SamplingParams())
    draft = honest.drafters["draft"].model
    drafters = {**honest.drafters, "lookup": reports_model_q(honest.drafters["lookup"], draft)}
    broken = replace(honest, drafters=drafters)
    prefix = [0, 1, 2, 0, 1]
    result = exact_distribution(
        auto_generator(target, broken, prefix, SamplingParams()), target, prefix, 4
    )
    assert result.tv > 1e-3


# ---- statistical certificate -------------------------------------------------------------------

SIGNIFICANCE, DETECTABLE_TV = 1e-3, 0.03
#: Runs so that each chi-square test (9 cells) detects TV 0.03 with probability 0.99.
RUNS = samples_for_power(cells=9, tv=DETECTABLE_TV, significance=SIGNIFICANCE, power=0.99)
#: Seed 3 until the first step stopped asking drafters: the new samples then gave the false alarm
#: this significance allows (p = 0.0004); 8x the runs at seeds 3 and 11 gave p = 0.42 and 0.80.
SEED = 4


@pytest.mark.slow
@pytest.mark.parametrize("broken", [False, True])
def test_statistical_certificate(broken, reports_model_q):
    target, auto = toy_auto(3, MIXED, SamplingParams())
    if broken:
        draft = auto.drafters["draft"].model
        drafters = {**auto.drafters, "lookup": reports_model_q(auto.drafters["lookup"], draft)}
        auto = replace(auto, drafters=drafters)
    prefix = [0, 1, 2, 0, 1]
    certificate = statistical_certificate(
        auto_generator(target, auto, prefix, SamplingParams()),
        target,
        prefix,
        3,
        RUNS,
        seed=SEED,
        significance=SIGNIFICANCE,
    )
    assert certificate.passed != broken, certificate.tests


def test_the_model_estimate_counts_only_its_own_recent_steps():
    trace = history(("draft", 4, 4), ("lookup", 3, 0), ("draft", 4, 1))
    assert estimated_alpha(trace, 0.5, 2.0, "draft") == (5 + 1) / (6 + 2)
    assert estimated_alpha(trace, 0.5, 2.0, "draft", last_steps=1) == (1 + 1) / (2 + 2)
    assert estimated_alpha(trace, 0.5, 2.0, "draft", last_steps=0) == 0.5
    assert estimated_alpha(trace, 0.5, 2.0) == (5 + 1) / (7 + 2)  # every drafter together


def test_lookup_and_suffix_propose_as_far_as_the_step_may_draft():
    """Every copy drafter reaches k_max, up to the longest pass the curve measured (17 tokens on
    FLAT: 16 drafts; 33 on ``long``: 32): prompt lookup's own default of 10 tokens would cut long
    copies short on a build with long exact blocks."""
    context = list(range(50)) * 2 + list(range(10))  # the continuation is known for 40 tokens
    long = CostCurve((1, 33), (0.010, 0.010))
    for costs, k_max, reach in ((FLAT, 4, 4), (FLAT, 16, 16), (FLAT, 48, 16), (long, 48, 32)):
        auto = auto_planner(costs, 64, k_max=k_max)
        for name in ("lookup", "suffix", "long_lookup"):
            assert len(auto.drafters[name].propose_tokens(context, k_max)) == reach, (name, k_max)


def test_a_long_match_is_judged_on_its_own_record():
    """Short matches that kept missing do not hold back a copy resumed on a long match: the
    long-match lookup proposes only after LONG_MATCH tokens match, and its estimate reads its
    own proposals only."""
    auto = auto_planner(CPU, 64, k_max=16)
    text, change = list(range(20, 40)), [60, 61, 62]
    context = [*text, *change, *text[:LONG_MATCH]]  # rejoins the text after a change
    copy = [*text[LONG_MATCH:], *change, text[0]]  # what followed the match, 16 tokens
    assert auto.drafters["long_lookup"].propose_tokens(context, 16) == copy
    assert auto.drafters["long_lookup"].propose_tokens(context[:-1], 16) == []  # 7 tokens match
    trace = Trace()
    emitted = list(range(100, 132))  # short matches wrong from the first token, long ones right
    for i, token in enumerate(emitted):
        trace.record(
            Step([token], proposals={"lookup": [7] * 4, "long_lookup": emitted[i : i + 4]})
        )
    assert auto.plan(context, trace, 16)[:2] == ("long_lookup", 16)
    for step in trace.proposals:
        step["long_lookup"] = step["lookup"]  # the same record for both: neither pays
    assert auto.plan(context, trace, 16)[:2] == ("", 0)
