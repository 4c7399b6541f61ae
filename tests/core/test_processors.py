"""Processors (logit bias, penalties, a grammar's mask) under speculation: exact when every
verified row is processed with its own history, certified by enumerating the real generator,
by a seeded statistical test and by per-seed identity with target-only decoding; the three
ways engines get it wrong (vLLM #22987, #36138, #42744) FAIL each certificate."""

from __future__ import annotations

import numpy as np
import pytest
from tiers import fast_only

from spec_decode import SamplingParams, draft_from_target, random_markov
from spec_decode.certify.exhaustive import (
    exact_distribution,
    exact_output_distribution,
    exact_tree_distribution,
)
from spec_decode.certify.generators import chain_generator
from spec_decode.certify.goodness_of_fit import samples_for_power
from spec_decode.certify.identity import identity_certificate, target_only_run
from spec_decode.certify.reference import TV_TOLERANCE
from spec_decode.certify.statistical import statistical_certificate
from spec_decode.certify.zoo.processors import (
    CommittedPrefixOnly,
    DraftsUnprocessed,
    VerificationUnprocessed,
)
from spec_decode.core.coupled import coupled_rule, coupled_tree_rule
from spec_decode.core.errors import BadRequest
from spec_decode.core.generate import generate_autoregressive
from spec_decode.core.processors import (
    LogitBias,
    Penalties,
    ProcessedModel,
    TokenAutomaton,
    tree_paths,
    with_processors,
)
from spec_decode.core.rules import exact_rule
from spec_decode.drafting.lookup import PromptLookupDrafter
from spec_decode.drafting.speculative import generate_speculative

VOCAB, PROMPT = 3, [0, 1, 0]
SIGNIFICANCE = 1e-3


def grammar() -> TokenAutomaton:
    """Two states over {0, 1, 2}: token 2 is never followed by 2, and after 2 comes 0 or 1;
    state 0 accepts everything but moves to state 1 on 2."""
    allowed = np.array([[True, True, True], [True, True, False]])
    moves = np.array([[0, 0, 1], [0, 0, 1]])
    return TokenAutomaton(allowed, moves)


PROCESSORS = {
    "penalties": lambda: [Penalties(frequency=0.8, presence=0.5)],
    "negative penalties": lambda: [Penalties(frequency=-0.6, presence=-0.4)],
    "logit bias": lambda: [LogitBias({1: 2.0, 2: -1.5})],
    "grammar": lambda: [grammar()],
    "all three": lambda: [grammar(), Penalties(1.0, 0.3), LogitBias({0: -1.0})],
}
CONTROLS = {
    "plain": SamplingParams(),
    "T=0.7 top-k 2": SamplingParams(0.7, top_k=2),
    "greedy": SamplingParams(0.0),
}


def models(kind: str):
    """The target and the draft of agreement 0.6, each processed with fresh processors."""
    target = random_markov(VOCAB, seed=5, concentration=0.4)
    draft = draft_from_target(target, 0.6, seed=6)
    start = len(PROMPT)
    return (
        ProcessedModel(target, PROCESSORS[kind](), start),
        ProcessedModel(draft, PROCESSORS[kind](), start),
        target,
    )


@pytest.mark.parametrize("control", CONTROLS)
@pytest.mark.parametrize("rule", [exact_rule, coupled_rule], ids=["standard", "coupled"])
@pytest.mark.parametrize("kind", fast_only(PROCESSORS, ["all three"]))
def test_processed_speculation_is_exact_by_enumeration(kind, rule, control):
    target, draft, _ = models(kind)
    sampling = CONTROLS[control]
    result = exact_output_distribution(target, draft, PROMPT, 4, 2, sampling=sampling, rule=rule)
    assert abs(result.total_probability - 1) < 1e-12
    assert result.tv < TV_TOLERANCE


@pytest.mark.parametrize("kind", fast_only(PROCESSORS, ["all three"]))
def test_a_raw_draft_and_lookup_drafts_are_exact_too(kind):
    """The drafts need not be processed (q is whatever they drew from), and a lookup draft the
    grammar forbids is simply rejected."""
    target, _, raw_target = models(kind)
    raw_draft = draft_from_target(raw_target, 0.6, seed=6)
    model = exact_output_distribution(target, raw_draft, PROMPT, 4, 2)
    lookup = exact_output_distribution(
        target, None, PROMPT, 4, 3, drafter=PromptLookupDrafter(VOCAB, max_ngram=1)
    )
    assert model.tv < TV_TOLERANCE and lookup.tv < TV_TOLERANCE


@pytest.mark.parametrize("kind", fast_only(["penalties", "grammar"], ["grammar"]))
def test_processed_trees_are_exact_by_enumeration(kind):
    target, draft, _ = models(kind)
    standard = exact_tree_distribution(target, draft, PROMPT, 3, (2, 1))
    coupled = exact_tree_distribution(target, draft, PROMPT, 3, (2, 1), rule=coupled_tree_rule)
    assert standard.tv < TV_TOLERANCE and coupled.tv < TV_TOLERANCE


BROKEN = {
    "penalty counted from the committed prefix (vllm #22987)": (CommittedPrefixOnly, "penalties"),
    "mask skipped inside drafts (vllm #36138)": (DraftsUnprocessed, "grammar"),
    "bias not applied in verification (vllm #42744)": (VerificationUnprocessed, "logit bias"),
}


def broken(name: str):
    """The broken target, the correct one it must match, and the processed draft."""
    variant, kind = BROKEN[name]
    target, draft, raw = models(kind)
    return variant(raw, PROCESSORS[kind](), len(PROMPT)), target, draft


@pytest.mark.parametrize("rule", [exact_rule, coupled_rule], ids=["standard", "coupled"])
@pytest.mark.parametrize("name", BROKEN)
def test_broken_processing_fails_the_enumeration(name, rule):
    wrong, target, draft = broken(name)
    generate = chain_generator(wrong, draft, PROMPT, 2, rule=rule)
    assert exact_distribution(generate, target, PROMPT, 4).tv > 0.01


@pytest.mark.parametrize("name", BROKEN)
def test_broken_processing_is_invisible_without_drafts(name):
    """What the certificates catch is the verification: the broken targets' one-token rows
    are the correct ones, so target-only decoding with them is exact."""
    wrong, target, _ = broken(name)
    generate = lambda rng, n: generate_autoregressive(wrong, PROMPT, n, rng).tokens  # noqa: E731
    assert exact_distribution(generate, target, PROMPT, 3).tv < TV_TOLERANCE


#: Four tokens from a vocabulary of 3: the joint tests run on 3 x 3 cells.
TESTED_TV = 0.1
RUNS = samples_for_power(cells=VOCAB * VOCAB, tv=TESTED_TV, significance=SIGNIFICANCE, power=0.99)


def test_the_statistical_certificate_passes_processed_speculation():
    """Power 0.99 against TV 0.1 at false-alarm rate 1e-3 on each test."""
    target, draft, _ = models("all three")
    sampling = SamplingParams(0.8)
    generate = chain_generator(target, draft, PROMPT, 2, sampling=sampling)
    certificate = statistical_certificate(
        generate, target, PROMPT, 2, RUNS, seed=11, sampling=sampling, significance=SIGNIFICANCE
    )
    assert certificate.passed, certificate.tests
    assert max(certificate.detectable_tv.values()) <= TESTED_TV


@pytest.mark.parametrize("name", BROKEN)
def test_the_statistical_certificate_fails_broken_processing(name):
    wrong, target, draft = broken(name)
    generate = chain_generator(wrong, draft, PROMPT, 2)
    certificate = statistical_certificate(
        generate, target, PROMPT, 2, RUNS, seed=12, significance=SIGNIFICANCE
    )
    assert not certificate.passed


@pytest.mark.parametrize("sampling", [SamplingParams(0.0), SamplingParams(0.7)], ids=str)
@pytest.mark.parametrize("kind", fast_only(PROCESSORS, ["all three"]))
def test_coupled_processed_output_is_target_only_output_for_every_seed(kind, sampling):
    target, draft, _ = models(kind)

    def speculative(source, n):
        return generate_speculative(
            target, draft, PROMPT, n, 3, source, sampling=sampling, rule=coupled_rule
        )

    certificate = identity_certificate(
        speculative, target_only_run(target, PROMPT, sampling), range(60), 12
    )
    assert certificate.passed, certificate.mismatched
    assert certificate.exercised or (sampling.greedy and certificate.accepted > 0)


@pytest.mark.parametrize("name", BROKEN)
def test_broken_processing_breaks_per_seed_identity(name):
    wrong, target, draft = broken(name)
    sampling = SamplingParams(0.7)

    def speculative(source, n):
        return generate_speculative(
            wrong, draft, PROMPT, n, 3, source, sampling=sampling, rule=coupled_rule
        )

    certificate = identity_certificate(
        speculative, target_only_run(target, PROMPT, sampling), range(60), 12
    )
    assert not certificate.passed


def test_penalties_and_bias_move_logits_by_the_stated_amounts():
    row = np.array([[0.5, 0.3, 0.2]])
    rows = np.repeat(row, 2, axis=0)
    Penalties(frequency=0.5, presence=0.25).process([1, 1], [(), (2,)], rows)
    assert np.allclose(rows[0], [0.5, 0.3 * np.exp(-1.25), 0.2])
    assert np.allclose(rows[1], [0.5, 0.3 * np.exp(-1.25), 0.2 * np.exp(-0.75)])
    biased = row.copy()
    LogitBias({0: -100.0, 2: 1.0}).process([], [()], biased)
    assert np.allclose(biased, [[0.5 * np.exp(-100), 0.3, 0.2 * np.e]])


def test_a_mask_that_leaves_no_mass_spreads_over_the_allowed_tokens():
    automaton = TokenAutomaton(np.array([[False, True, True]]), np.zeros((1, 3), dtype=int))
    rows = np.array([[1.0, 0.0, 0.0]])
    automaton.process([], [()], rows)
    assert rows.tolist() == [[0.0, 1.0, 1.0]]


def test_processed_rows_read_the_generated_tokens_only():
    target = random_markov(VOCAB, seed=1)
    processed = ProcessedModel(target, [Penalties(presence=2.0)], start=2)
    assert np.allclose(processed.next_dist([1, 1]), target.next_dist([1, 1]))
    assert not np.allclose(processed.next_dist([1, 1, 1]), target.next_dist([1, 1, 1]))
    with pytest.raises(ValueError, match="shorter than the prompt"):
        processed.next_dist([1])


def test_block_rows_equal_one_token_rows():
    target, _, _ = models("all three")
    tokens = [1, 2, 0, 2]
    block = target.score(PROMPT, tokens)
    one_by_one = [target.next_dist(PROMPT + tokens[:i]) for i in range(len(tokens) + 1)]
    assert np.array_equal(block, np.stack(one_by_one))


def test_tree_paths_follow_the_parents():
    assert tree_paths([5, 6, 7, 8], [-1, -1, 0, 1]) == [[5], [6], [5, 7], [6, 8]]


def test_settings_out_of_range_are_refused_naming_the_field():
    with pytest.raises(BadRequest, match="frequency_penalty") as error:
        Penalties(frequency=2.5)
    assert error.value.param == "frequency_penalty"
    with pytest.raises(BadRequest, match="logit_bias"):
        LogitBias({1: 101.0})
    with pytest.raises(BadRequest, match="outside the vocabulary"):
        LogitBias({7: 1.0}).check_vocabulary(3)
    with pytest.raises(BadRequest, match="token ids"):
        LogitBias({"a": 1.0})  # type: ignore[dict-item]


def test_processors_that_change_nothing_leave_the_model_as_it_is():
    target = random_markov(VOCAB, seed=1)
    assert with_processors(target, [Penalties(), LogitBias({})], 0) is target
    assert isinstance(with_processors(target, [Penalties(presence=1.0)], 0), ProcessedModel)
