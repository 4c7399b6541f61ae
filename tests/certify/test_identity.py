"""The identity certificate: under the coupled rule, speculative and target-only decoding emit the
same token ids for every seed, with every drafter (lookup, suffix, model draft, auto, tree) and
every sampling control; three broken position counters FAIL it.

The fast tier runs a few seeds per combination; the slow tier runs 1,000.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from spec_decode import SamplingParams, draft_from_target, random_markov
from spec_decode.certify.identity import Run, identity_certificate, target_only_run
from spec_decode.certify.zoo.coupled import bonus_from_last_drafted_noise, reusing_rejected_position
from spec_decode.certify.zoo.positional import StepRelativeNoise
from spec_decode.core.coupled import coupled_rule, coupled_tree_rule
from spec_decode.core.generate import generate
from spec_decode.core.models import MarkovModel
from spec_decode.core.steps import chain_step
from spec_decode.drafting.auto import AutoPlanner
from spec_decode.drafting.costs import CostCurve
from spec_decode.drafting.drafters import ModelDrafter
from spec_decode.drafting.lookup import PromptLookupDrafter
from spec_decode.drafting.policies import as_policy
from spec_decode.drafting.rule_choice import rule_by_name
from spec_decode.drafting.speculative import generate_speculative, generate_tree
from spec_decode.drafting.suffix import SuffixDrafter

VOCAB, TOKENS, K = 6, 12, 3
#: A prompt that repeats, so lookup and suffix have something to copy.
PROMPT = [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
#: A GPU-like cost curve on which the auto policy drafts (fixed: the choice reads no clock).
FLAT = CostCurve((1, 17), (0.010, 0.010), 0.001)
SAMPLINGS = {
    "greedy": SamplingParams(0.0),
    "T=0.3": SamplingParams(0.3),
    "T=0.7": SamplingParams(0.7),
    "T=1": SamplingParams(1.0),
    "T=0.7 top-k 3": SamplingParams(0.7, top_k=3),
    "T=1 top-p 0.8": SamplingParams(1.0, top_p=0.8),
    "T=1 min-p 0.1": SamplingParams(1.0, min_p=0.1),
}


def pair() -> tuple[MarkovModel, MarkovModel]:
    """A peaked target (it repeats itself) and a draft of agreement 0.7."""
    target = random_markov(VOCAB, seed=3, concentration=0.3)
    return target, draft_from_target(target, 0.7, seed=4, concentration=0.3)


def speculative_run(name: str, sampling: SamplingParams) -> Run:
    """The coupled speculative generator with drafter ``name``."""
    target, draft = pair()
    if name == "tree":
        return lambda source, n: generate_tree(
            target, draft, PROMPT, n, (2, 2), source, sampling=sampling, rule=coupled_tree_rule
        )
    if name == "auto":
        model = ModelDrafter(draft, sampling, coupled=True)
        drafters = {
            "lookup": PromptLookupDrafter(VOCAB, max_ngram=2),
            "suffix": SuffixDrafter(VOCAB, max_match=3, min_probability=0.0),
            "draft": model,
        }
        planner = AutoPlanner(FLAT, drafters, "draft", k_max=4)
        step = rule_by_name("coupled").planned_step(target, drafters, planner, sampling)
        return lambda source, n: generate(target, step, PROMPT, n, source)
    drafter = {
        "lookup": PromptLookupDrafter(VOCAB, max_ngram=2),
        "suffix": SuffixDrafter(VOCAB, max_match=3, min_probability=0.0),
        "model": None,
    }[name]
    return lambda source, n: generate_speculative(
        target, draft, PROMPT, n, K, source, sampling=sampling, rule=coupled_rule, drafter=drafter
    )


def certify(run: Run, sampling: SamplingParams, seeds: range, sampler: str = "race"):
    target_only = target_only_run(pair()[0], PROMPT, sampling)
    return identity_certificate(run, target_only, seeds, TOKENS, sampler)


DRAFTERS = ["lookup", "suffix", "model", "auto", "tree"]


@pytest.mark.parametrize("sampling_name", SAMPLINGS)
@pytest.mark.parametrize("drafter", DRAFTERS)
def test_coupled_output_is_target_only_output_for_every_seed(drafter, sampling_name):
    sampling = SAMPLINGS[sampling_name]
    certificate = certify(speculative_run(drafter, sampling), sampling, range(12))
    assert certificate.passed, certificate.mismatched
    assert certificate.accepted > 0


@pytest.mark.parametrize("drafter", DRAFTERS)
def test_identity_holds_with_the_inverse_cdf_sampler_too(drafter):
    sampling = SAMPLINGS["T=1"]
    certificate = certify(speculative_run(drafter, sampling), sampling, range(30), "inverse-cdf")
    assert certificate.passed and certificate.exercised, certificate


def test_the_sweep_accepts_and_rejects_drafts():
    """Not vacuous: over the seeds, drafts are both accepted and rejected."""
    for drafter in DRAFTERS:
        certificate = certify(
            speculative_run(drafter, SAMPLINGS["T=0.7"]), SAMPLINGS["T=0.7"], range(15)
        )
        assert certificate.exercised, (drafter, certificate)


@pytest.mark.slow
@pytest.mark.parametrize("sampling_name", SAMPLINGS)
@pytest.mark.parametrize("drafter", DRAFTERS)
def test_identity_over_1000_seeds(drafter, sampling_name):
    sampling = SAMPLINGS[sampling_name]
    certificate = certify(speculative_run(drafter, sampling), sampling, range(1000))
    assert certificate.seeds == 1000
    assert certificate.passed, certificate.mismatched


def broken_runs() -> dict[str, Callable[[SamplingParams], Run]]:
    target, draft = pair()

    def step_relative(sampling: SamplingParams) -> Run:
        return lambda source, n: generate_speculative(
            target,
            draft,
            PROMPT,
            n,
            K,
            StepRelativeNoise(source),
            sampling=sampling,
            rule=coupled_rule,
        )

    def bonus(sampling: SamplingParams) -> Run:
        return lambda source, n: generate_speculative(
            target,
            draft,
            PROMPT,
            n,
            K,
            source,
            sampling=sampling,
            rule=bonus_from_last_drafted_noise,
        )

    def reuse(sampling: SamplingParams) -> Run:
        drafter = ModelDrafter(draft, sampling, coupled=True)
        step = reusing_rejected_position(
            chain_step(target, drafter, as_policy(K), coupled_rule, sampling)
        )
        return lambda source, n: generate(target, step, PROMPT, n, source)

    return {
        "step-relative noise": step_relative,
        "bonus from the last drafted noise": bonus,
        "next step reuses the rejected position": reuse,
    }


@pytest.mark.parametrize("name", broken_runs())
def test_broken_position_counters_fail_identity(name):
    sampling = SAMPLINGS["T=1"]
    certificate = certify(broken_runs()[name](sampling), sampling, range(30))
    assert not certificate.passed
    assert len(certificate.mismatched) >= 5, certificate.mismatched
