"""Exactness of prompt lookup, the combining and confidence cut-off drafters under every adaptive k
policy: certified exhaustively (every drafter with every policy, sampling controls, paths where k
adapts) and statistically, and the two broken variants in the zoo must FAIL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from spec_decode import (
    MarkovModel,
    SamplingParams,
    Trace,
    draft_from_target,
    generate_speculative,
    random_markov,
)
from spec_decode.certify.enumeration import enumerate_outputs
from spec_decode.certify.exhaustive import exact_output_distribution
from spec_decode.certify.generators import chain_generator
from spec_decode.certify.goodness_of_fit import samples_for_power
from spec_decode.certify.statistical import statistical_certificate
from spec_decode.certify.zoo.drafters import confidence_after_draw, lookup_with_model_q
from spec_decode.core.models import Model
from spec_decode.drafting.drafters import FallbackDrafter, ModelDrafter
from spec_decode.drafting.lookup import PromptLookupDrafter
from spec_decode.drafting.policies import (
    CostModelK,
    FixedK,
    ScheduleK,
)

TOLERANCE = 1e-12


# ---- exactness: every drafter with every policy ------------------------------------------------


def drafters(target: Model, draft: Model, sampling: SamplingParams) -> dict[str, object]:
    vocab = target.vocab_size
    return {
        "model": ModelDrafter(draft, sampling),
        "lookup": PromptLookupDrafter(vocab, max_ngram=2, max_tokens=3),
        "lookup then model": FallbackDrafter(
            PromptLookupDrafter(vocab, min_ngram=2, max_ngram=2), ModelDrafter(draft, sampling)
        ),
        "confidence cut-off": ModelDrafter(draft, sampling, min_confidence=0.7),
    }


POLICIES = {
    "fixed": FixedK(2),
    "schedule": ScheduleK(initial=2, k_max=4),
    "cost": CostModelK(k_max=4, draft_cost=0.3, prior_weight=1.0),
}
DRAFTERS = ("model", "lookup", "lookup then model", "confidence cut-off")
SAMPLINGS = {
    "plain": SamplingParams(),
    "temperature 0.7, top-k 2": SamplingParams(temperature=0.7, top_k=2),
    "greedy": SamplingParams(temperature=0),
}
#: (vocabulary, tokens, prefix): the prefixes repeat themselves, so prompt lookup finds matches.
SHAPES = {"V=2, 6 tokens": (2, 6, [0, 1, 1, 0, 1]), "V=3, 4 tokens": (3, 4, [0, 1, 2, 0, 1])}


def toy_pair(vocab: int) -> tuple[MarkovModel, MarkovModel]:
    target = random_markov(vocab, seed=5)
    return target, draft_from_target(target, 0.5, seed=6)


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("drafter", DRAFTERS)
def test_every_drafter_with_every_policy_is_exact(drafter, policy, shape):
    vocab, n_tokens, prefix = SHAPES[shape]
    target, draft = toy_pair(vocab)
    result = exact_output_distribution(
        target,
        None,
        prefix,
        n_tokens,
        POLICIES[policy],
        drafter=drafters(target, draft, SamplingParams())[drafter],
    )
    assert abs(result.total_probability - 1) < TOLERANCE
    assert result.tv < TOLERANCE


@pytest.mark.parametrize("sampling", ["temperature 0.7, top-k 2", "greedy"])
@pytest.mark.parametrize("drafter", DRAFTERS)
def test_drafters_are_exact_under_sampling_controls(drafter, sampling):
    target, draft = toy_pair(3)
    controls = SAMPLINGS[sampling]
    result = exact_output_distribution(
        target,
        None,
        [0, 1, 2, 0, 1],
        4,
        POLICIES["schedule"],
        sampling=controls,
        drafter=drafters(target, draft, controls)[drafter],
    )
    assert result.tv < TOLERANCE


@pytest.mark.slow
@pytest.mark.parametrize(
    ("shape", "sampling"),
    [
        ("V=2, 6 tokens", "plain"),
        ("V=3, 4 tokens", "plain"),
        ("V=3, 4 tokens", "temperature 0.7, top-k 2"),
        ("V=3, 4 tokens", "greedy"),
    ],
)
def test_the_certified_confidence_cut_off_does_cut(shape, sampling):
    """Some branch of each certified setting stops drafting short of what k allowed (the cut-off
    reads the raw rows, so it fires under greedy decoding too); the uncut drafter never does."""
    vocab, n_tokens, prefix = SHAPES[shape]
    target, draft = toy_pair(vocab)
    controls = SAMPLINGS[sampling]

    def chance_of_a_short_step(drafter) -> float:
        def cut_short(source) -> list[int]:
            trace = generate_speculative(
                target, None, prefix, n_tokens, 2, source, sampling=controls, drafter=drafter
            )
            emitted = np.cumsum([0, *(np.asarray(trace.accepted_lengths) + 1)])
            allowed = [min(2, n_tokens - done - 1) for done in emitted[:-1]]
            return [int(any(np.less(trace.drafted_lengths, allowed)))]

        return enumerate_outputs(cut_short).distribution.get((1,), 0.0)

    named = drafters(target, draft, controls)
    assert chance_of_a_short_step(named["model"]) == 0.0
    assert chance_of_a_short_step(named["confidence cut-off"]) > 0.0


@pytest.mark.slow
@pytest.mark.parametrize(("policy", "second_ks"), [("fixed", 1), ("schedule", 2), ("cost", 2)])
def test_the_certificate_covers_paths_where_k_adapts(policy, second_ks):
    """Enumerating the drafted lengths shows an adaptive policy drafts differently on different
    branches: the second of three or more steps drafts 1 or 2 tokens depending on the first."""
    target, draft = toy_pair(2)

    def drafted_lengths(source) -> list[int]:
        trace = generate_speculative(target, draft, [0, 1, 1, 0, 1], 6, POLICIES[policy], source)
        return trace.drafted_lengths

    sequences = enumerate_outputs(drafted_lengths).distribution
    assert len({sequence[1] for sequence in sequences if len(sequence) >= 3}) == second_ks


def test_a_policy_reading_the_emitted_tokens_is_still_exact():
    """k may depend on anything in the past, here the last emitted token."""

    @dataclass(frozen=True)
    class LastTokenK:
        def next_k(self, trace: Trace) -> int:
            return 3 if trace.tokens and trace.tokens[-1] == 1 else 1

    target, draft = toy_pair(3)
    result = exact_output_distribution(target, draft, [0], 4, LastTokenK())
    assert result.tv < TOLERANCE


@dataclass(frozen=True)
class Bound:
    """A zoo drafter function ``(draft_model, prefix, k, rng)`` bound to its draft model."""

    function: Callable
    model: Model

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    def propose(self, prefix, k, rng):
        return self.function(self.model, prefix, k, rng)


@pytest.mark.slow
@pytest.mark.parametrize("broken", [lookup_with_model_q, confidence_after_draw])
@pytest.mark.parametrize("policy", POLICIES)
def test_the_certificate_fails_the_broken_variants(broken, policy):
    target, draft = toy_pair(3)
    result = exact_output_distribution(
        target, None, [0, 1, 2, 0, 1], 4, POLICIES[policy], drafter=Bound(broken, draft)
    )
    assert result.tv > 1e-3


# ---- statistical certificates ------------------------------------------------------------------

SIGNIFICANCE, DETECTABLE_TV = 1e-3, 0.03
RUNS = samples_for_power(cells=9, tv=DETECTABLE_TV, significance=SIGNIFICANCE, power=0.99)
#: Each drafter with an adaptive policy, and a broken drafter that the tests must catch.
STATISTICAL = {
    "lookup, schedule": ("lookup", "schedule"),
    "lookup then model, cost": ("lookup then model", "cost"),
    "confidence cut-off, schedule": ("confidence cut-off", "schedule"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", STATISTICAL)
def test_statistical_certificate_passes(case):
    target, draft = toy_pair(3)
    drafter, policy = STATISTICAL[case]
    prefix = [0, 1, 2, 0, 1]
    chosen = drafters(target, draft, SamplingParams())[drafter]
    generate = chain_generator(target, None, prefix, POLICIES[policy], drafter=chosen)
    certificate = statistical_certificate(
        generate, target, prefix, 2, RUNS, seed=3, significance=SIGNIFICANCE
    )
    assert certificate.passed, certificate.tests


@pytest.mark.slow
@pytest.mark.parametrize("broken", [lookup_with_model_q, confidence_after_draw])
def test_statistical_certificate_fails_the_broken_variants(broken):
    target, draft = toy_pair(3)
    prefix = [0, 1, 2, 0, 1]
    generate = chain_generator(
        target, None, prefix, POLICIES["schedule"], drafter=Bound(broken, draft)
    )
    certificate = statistical_certificate(
        generate, target, prefix, 2, RUNS, seed=3, significance=SIGNIFICANCE
    )
    assert not certificate.passed
