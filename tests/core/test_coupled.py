"""The coupled rule's exactness in distribution: the real generator enumerated down every path
(inverse-CDF noise over the enumerating source) for chains, lookup and trees, plain, warped and
greedy, and the seeded statistical certificate with the race; broken variants FAIL."""

from __future__ import annotations

import numpy as np
import pytest

from spec_decode import SamplingParams, draft_from_target, random_markov
from spec_decode.certify.exhaustive import (
    exact_distribution,
    exact_output_distribution,
    exact_tree_distribution,
)
from spec_decode.certify.generators import chain_generator
from spec_decode.certify.goodness_of_fit import samples_for_power
from spec_decode.certify.grid import DEFAULT_CASES
from spec_decode.certify.reference import TV_TOLERANCE
from spec_decode.certify.statistical import statistical_certificate
from spec_decode.certify.zoo.coupled import bonus_from_last_drafted_noise, reusing_rejected_position
from spec_decode.core.coupled import coupled_rule, coupled_tree_rule, is_coupled
from spec_decode.core.generate import generate
from spec_decode.core.noise import positional_source
from spec_decode.core.rules import exact_rule
from spec_decode.core.steps import chain_step
from spec_decode.drafting.drafters import ModelDrafter
from spec_decode.drafting.lookup import PromptLookupDrafter
from spec_decode.drafting.policies import as_policy

SIGNIFICANCE = 1e-3


def test_the_coupled_rules_say_they_need_positional_noise():
    assert is_coupled(coupled_rule) and is_coupled(coupled_tree_rule)
    assert not is_coupled(exact_rule)
    p = np.full((2, 3), 1 / 3)
    with pytest.raises(TypeError, match="positional noise"):
        coupled_rule(p, p[:1], [0], np.random.default_rng(0))


def grid() -> list:
    """The default grid; its two plain cases (thousands of paths) in the slow tier."""
    slow = pytest.mark.slow
    return [
        pytest.param(c, marks=slow) if c.sampling.is_identity and c.vocab > 2 else c
        for c in DEFAULT_CASES
    ]


@pytest.mark.parametrize("case", grid(), ids=str)
def test_the_default_exhaustive_grid_passes_under_the_coupled_rule(case):
    target, draft = case.models(0)
    comparison = exact_output_distribution(
        target,
        draft,
        case.prefix,
        case.n_tokens,
        case.k,
        sampling=case.sampling,
        rule=coupled_rule,
    )
    assert comparison.tv < TV_TOLERANCE


@pytest.mark.parametrize(
    "sampling", [SamplingParams(), SamplingParams(0.6, top_p=0.7), SamplingParams(0.0)]
)
def test_coupled_trees_and_lookup_are_exact_by_enumeration(sampling):
    target = random_markov(3, seed=5, concentration=0.4)
    draft = draft_from_target(target, 0.6, seed=6)
    prefix = [0, 1, 0]
    tree = exact_tree_distribution(
        target, draft, prefix, 4, (2, 1), sampling=sampling, rule=coupled_tree_rule
    )
    lookup = exact_output_distribution(
        target,
        None,
        prefix,
        4,
        2,
        sampling=sampling,
        rule=coupled_rule,
        drafter=PromptLookupDrafter(3, max_ngram=1),
    )
    assert tree.tv < TV_TOLERANCE and lookup.tv < TV_TOLERANCE


def test_broken_position_counters_fail_the_enumeration():
    target = random_markov(3, seed=5)
    draft = draft_from_target(target, 0.9, seed=6)  # full acceptances are common
    bonus = exact_output_distribution(target, draft, [0], 4, 2, rule=bonus_from_last_drafted_noise)
    drafter = ModelDrafter(draft, coupled=True)
    step = reusing_rejected_position(
        chain_step(target, drafter, as_policy(2), coupled_rule, SamplingParams())
    )

    def reuse(source, n):
        return generate(target, step, [0], n, positional_source(source)).tokens

    assert bonus.tv > 0.01
    assert exact_distribution(reuse, target, [0], 4).tv > 0.01


#: The fast statistical test detects TV 0.15 with probability 0.99; the slow ones 0.05 and 0.02.
K = 2


def runs(tv: float) -> int:
    return samples_for_power(cells=4 * 4, tv=tv, significance=SIGNIFICANCE, power=0.99)


def coupled_generator(rule=coupled_rule):
    """The coupled chain with race noise, each run seeded by one draw of the test's generator."""
    target = random_markov(4, seed=1)
    draft = draft_from_target(target, 0.3, seed=2)
    generate_chain = chain_generator(target, draft, [0], K, rule=rule)
    return target, lambda rng, n: generate_chain(positional_source(rng), n)


@pytest.mark.parametrize(
    "tv", [0.15, *(pytest.param(tv, marks=pytest.mark.slow) for tv in (0.05, 0.02))]
)
def test_the_statistical_certificate_passes_the_coupled_race(tv):
    target, generate_runs = coupled_generator()
    certificate = statistical_certificate(
        generate_runs, target, [0], K, runs(tv), seed=11, significance=SIGNIFICANCE
    )
    assert certificate.passed, certificate.tests
    assert max(certificate.detectable_tv.values()) <= tv + 1e-9


def test_the_statistical_certificate_fails_the_bonus_from_the_last_drafted_noise():
    target, generate_runs = coupled_generator(bonus_from_last_drafted_noise)
    certificate = statistical_certificate(
        generate_runs, target, [0], K, runs(0.15), seed=11, significance=SIGNIFICANCE
    )
    assert not certificate.passed
