"""Prompt lookup, the combining and confidence cut-off drafters, and the adaptive k policies:
proposals on hand-made sequences, k trajectories on hand-built traces, the library and the command
line (their certificates: test_lookup_policies_certificates.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from spec_decode import (
    MarkovModel,
    Trace,
)
from spec_decode.cli.app import app
from spec_decode.core.randomness import NumpySource
from spec_decode.drafting.drafters import FallbackDrafter, ModelDrafter
from spec_decode.drafting.lookup import PromptLookupDrafter, lookup_continuation
from spec_decode.drafting.policies import (
    CostModelK,
    FixedK,
    ScheduleK,
    estimated_alpha,
    measured_draft_cost,
    optimal_k,
    policy_by_name,
)
from spec_decode.toy.experiments import ToySetup, run_experiment


class NoRandomness:
    """A random source that fails the test if a deterministic drafter draws from it."""

    def bernoulli(self, prob: float) -> bool:
        raise AssertionError("a deterministic drafter drew randomness")

    categorical = uniform = bernoulli


# ---- prompt lookup on hand-made sequences ------------------------------------------------------


@pytest.mark.parametrize(
    ("context", "min_n", "max_n", "max_tokens", "expected"),
    [
        ([1, 2, 3, 9, 1, 2], 1, 2, 3, [3, 9, 1]),  # match: what followed "1 2"
        ([1, 2, 5, 1, 2, 7, 1, 2], 1, 2, 5, [7, 1, 2]),  # the most recent occurrence wins
        ([5, 1, 2, 3, 8, 2, 3, 9, 1, 2, 3], 1, 3, 3, [8, 2, 3]),  # the longest n is tried first
        ([5, 1, 2, 3, 8, 2, 3, 9, 1, 2, 3], 1, 2, 3, [9, 1, 2]),  # ... within the n range
        ([3, 1, 4, 1], 1, 2, 4, [4, 1]),  # no bigram recurs, the unigram does
        ([3, 1, 4, 1], 2, 3, 4, []),  # ... unless min_ngram excludes it
        ([0, 1, 2, 3], 1, 3, 4, []),  # nothing recurs
        ([7, 7, 7], 2, 2, 4, [7]),  # an occurrence may overlap the final n-gram
        ([1, 2, 1], 1, 1, 5, [2, 1]),  # a continuation stops at the end of the context
        ([1, 2, 3, 1, 2], 1, 2, 1, [3]),  # max length
        ([1, 2, 3, 1, 2], 1, 2, 0, []),
        ([4], 1, 3, 4, []),
    ],
)
def test_lookup_continuation(context, min_n, max_n, max_tokens, expected):
    assert lookup_continuation(context, min_n, max_n, max_tokens) == expected


def test_lookup_drafter_proposes_one_hot_rows_within_k_and_its_cap():
    drafter = PromptLookupDrafter(vocab_size=10, max_ngram=2, max_tokens=3)
    prefix = [1, 2, 3, 4, 5, 6, 1, 2]
    for k, expected in [(1, [3]), (2, [3, 4]), (8, [3, 4, 5])]:
        tokens, q = drafter.propose(prefix, k, NoRandomness())
        assert tokens == expected
        assert np.array_equal(q, np.eye(10)[expected])
    tokens, q = drafter.propose([1, 2, 3], 4, NoRandomness())
    assert tokens == [] and q.shape == (0, 10)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"vocab_size": 0},
        {"vocab_size": 4, "min_ngram": 0},
        {"vocab_size": 4, "min_ngram": 3, "max_ngram": 2},
        {"vocab_size": 4, "max_tokens": 0},
    ],
)
def test_bad_lookup_arguments_are_refused(kwargs):
    with pytest.raises(ValueError):
        PromptLookupDrafter(**kwargs)


# ---- the combining and confidence cut-off drafters ---------------------------------------------

#: From token 0 the draft is certain to say 1; from token 1 it is a coin flip.
CERTAIN_THEN_UNSURE = MarkovModel(np.array([[0.0, 1.0], [0.5, 0.5]]))


def test_fallback_drafter_uses_lookup_when_it_matches_and_the_model_otherwise():
    drafter = FallbackDrafter(PromptLookupDrafter(2), ModelDrafter(CERTAIN_THEN_UNSURE))
    tokens, q = drafter.propose([1, 0, 1], 1, NoRandomness())  # lookup: "1" was followed by 0
    assert tokens == [0] and np.array_equal(q, [[1.0, 0.0]])
    tokens, q = drafter.propose([0], 1, NumpySource(np.random.default_rng(0)))  # no match
    assert tokens == [1] and np.array_equal(q, [[0.0, 1.0]])
    with pytest.raises(ValueError, match="vocabularies differ"):
        FallbackDrafter(PromptLookupDrafter(3), ModelDrafter(CERTAIN_THEN_UNSURE))


def test_confidence_cut_off_stops_where_the_draft_row_is_unsure():
    source = NumpySource(np.random.default_rng(0))
    tokens, q = ModelDrafter(CERTAIN_THEN_UNSURE, min_confidence=0.6).propose([0], 4, source)
    assert tokens == [1] and np.array_equal(q, [[0.0, 1.0]])
    tokens, _ = ModelDrafter(CERTAIN_THEN_UNSURE, min_confidence=0.5).propose([0], 4, source)
    assert len(tokens) == 4  # a 0.5 row is not below a 0.5 cut-off
    tokens, q = ModelDrafter(CERTAIN_THEN_UNSURE, min_confidence=0.6).propose([1], 4, source)
    assert tokens == [] and q.shape == (0, 2)
    with pytest.raises(ValueError, match="min_confidence"):
        ModelDrafter(CERTAIN_THEN_UNSURE, min_confidence=1.5)


# ---- k trajectories on scripted acceptance histories -------------------------------------------


def scripted(steps: list[tuple[int, int]], **seconds: float) -> Trace:
    """A trace whose chain steps drafted and accepted the given numbers of tokens."""
    return Trace(
        drafted_lengths=[drafted for drafted, _ in steps],
        accepted_lengths=[accepted for _, accepted in steps],
        draft_call_counts=[drafted for drafted, _ in steps],
        **seconds,
    )


def trajectory(policy, steps: list[tuple[int, int]]) -> list[int]:
    """The k the policy picks before each step of the scripted history, and after the last."""
    return [policy.next_k(scripted(steps[:i])) for i in range(len(steps) + 1)]


def test_fixed_k_never_moves():
    assert trajectory(FixedK(3), [(3, 3), (3, 0), (0, 0)]) == [3, 3, 3, 3]


def test_schedule_grows_after_full_acceptance_and_shrinks_after_a_rejection():
    history = [(4, 4), (6, 6), (8, 3), (0, 0), (2, 2), (9, 9), (10, 10), (10, 0), (9, 1)]
    # +2, +2, -1, no evidence, +2 (a short block accepted in full counts), +2, capped at 10, -1, -1
    assert trajectory(ScheduleK(initial=4, k_max=10), history) == [4, 6, 8, 7, 7, 9, 10, 10, 9, 8]
    assert trajectory(ScheduleK(initial=2), [(2, 0), (1, 0), (1, 0)]) == [2, 1, 1, 1]


def test_alpha_estimate_counts_only_the_drafts_that_were_tried():
    trace = scripted([(4, 4), (4, 1)])  # 5 successes, 1 failure; 2 drafts never tried
    assert estimated_alpha(trace, prior_alpha=0.5, prior_weight=2) == pytest.approx(6 / 8)
    assert estimated_alpha(Trace(), prior_alpha=0.3, prior_weight=2) == pytest.approx(0.3)


def test_cost_policy_follows_the_optimal_k_at_the_running_alpha():
    policy = CostModelK(k_max=10, draft_cost=0.1)
    good, bad = [(k, k) for k in (1, 3, 6, 10, 10)], [(10, 0)] * 8
    ks = trajectory(policy, good + bad)
    assert ks == [
        optimal_k(estimated_alpha(scripted((good + bad)[:i]), 0.5, 2.0), 0.1, 10)
        for i in range(len(ks))
    ]
    assert ks[0] == optimal_k(0.5, 0.1, 10) == 2
    assert ks[len(good)] == 10  # a long run of full acceptance reaches the cap
    assert ks[-1] < ks[len(good)]  # rejections bring k back down
    assert ks == sorted(ks[: len(good) + 1]) + ks[len(good) + 1 :]


def test_cost_policy_measures_the_cost_ratio_from_the_trace():
    policy = CostModelK(k_max=10, initial=3)
    assert policy.next_k(Trace()) == 3  # nothing timed yet
    assert policy.next_k(scripted([(0, 0)], target_seconds=1.0)) == 3  # no draft call timed yet
    history = [(4, 4), (4, 3)]  # alpha = (7 + 1) / (8 + 2) = 0.8
    cheap = scripted(history, draft_seconds=0.08, target_seconds=2.0)  # 0.01 s vs 1 s
    dear = scripted(history, draft_seconds=4.0, target_seconds=2.0)  # 0.5 s vs 1 s
    assert measured_draft_cost(cheap) == pytest.approx(0.01)
    assert measured_draft_cost(dear) == pytest.approx(0.5)
    assert policy.next_k(cheap) == optimal_k(0.8, 0.01, 10) > policy.next_k(dear)
    assert policy.next_k(dear) == optimal_k(0.8, 0.5, 10)


def test_policies_by_name():
    assert policy_by_name("fixed", 3) == FixedK(3)
    assert policy_by_name("schedule", 3, k_max=8) == ScheduleK(initial=3, k_max=8)
    assert policy_by_name("cost", 2, 8, 0.2) == CostModelK(k_max=8, draft_cost=0.2, initial=2)
    with pytest.raises(ValueError, match="unknown policy"):
        policy_by_name("greedy", 3)


@pytest.mark.parametrize(
    "make",
    [
        lambda: FixedK(0),
        lambda: ScheduleK(initial=0),
        lambda: ScheduleK(initial=5, k_max=4),
        lambda: ScheduleK(grow=-1),
        lambda: CostModelK(draft_cost=-0.1),
        lambda: CostModelK(prior_alpha=1.5),
        lambda: CostModelK(prior_weight=0),
        lambda: CostModelK(initial=20, k_max=16),
        lambda: policy_by_name("schedule", 20, k_max=16),
    ],
)
def test_bad_policy_arguments_are_refused(make):
    with pytest.raises(ValueError):
        make()


# ---- library and command line ------------------------------------------------------------------


def test_cost_policy_reaches_the_cap_with_a_perfect_draft():
    result = run_experiment(ToySetup(), 1.0, 2, 2000, 0.05, seed=0, policy="cost", k_max=6)
    assert result.tokens_per_pass > 6.5  # k = 6 almost throughout: 7 tokens per pass


def test_run_command_takes_a_policy_and_a_confidence_cut_off():
    runner = CliRunner()
    result = runner.invoke(
        app, ["run", "--policy", "schedule", "--confidence", "0.1", "--tokens", "300", "--json"]
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["policy"] == "schedule" and payload["min_confidence"] == 0.1
    text = runner.invoke(app, ["run", "--policy", "cost", "--tokens", "300"])
    assert text.exit_code == 0 and "fixed k=4" in text.output
    for args in (["--policy", "greedy"], ["--confidence", "1.5"], ["--k-max", "0"]):
        assert runner.invoke(app, ["run", *args]).exit_code == 2


@pytest.mark.slow
def test_generate_command_drafts_by_prompt_lookup_on_the_target_alone(tmp_path, tiny_qwen2_folder):
    pytest.importorskip("transformers")
    target = tiny_qwen2_folder(tmp_path / "target", seed=0)
    args = ["generate", "--target", str(target), "--draft", "lookup", "--policy", "schedule"]
    args += ["--prompt", "def x ( ) : return x + 1 def x ( ) :", "--raw"]
    result = CliRunner().invoke(app, [*args, "--max-new-tokens", "12", "--compare", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout[result.stdout.index("{") :])
    assert payload["draft"] == "lookup" and payload["policy"] == "schedule"
    assert payload["load_seconds"]["draft"] == 0.0  # no draft model was loaded
    assert payload["identical_tokens"] is True
    assert payload["runs"]["speculative"]["proposed"] > 0
