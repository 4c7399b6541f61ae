"""Tree speculation against theory: the sibling outcome is what the code does, chain-shaped
trees reduce to the chain formulas, measured tokens per pass match theory, and where a tree beats
a chain at equal drafted tokens."""

from __future__ import annotations

import numpy as np
import pytest
from tree_pairs import pair, rng

from spec_decode import (
    SamplingParams,
    draft_from_target,
    generate_speculative,
    random_markov,
)
from spec_decode.certify.enumeration import enumerate_outputs
from spec_decode.core.tree import ROOT, TokenTree
from spec_decode.core.tree_rules import verify_tree
from spec_decode.drafting.policies import expected_tokens_per_pass
from spec_decode.drafting.speculative import generate_tree
from spec_decode.drafting.tree_drafters import draw_siblings
from spec_decode.theory.standard import (
    MAX_THEORY_BRANCHES,
    markov_expectation,
    sibling_outcome,
    tree_markov_expectation,
    tree_tokens_per_pass,
)

# ---- theory ------------------------------------------------------------------------------------


def test_one_sibling_is_the_chain_rule():
    target, draft = pair(6)
    p, q = target.table[0], draft.table[0]
    accepted, stopped = sibling_outcome(p, q, 1)
    np.testing.assert_array_equal(accepted, np.minimum(p, q))
    np.testing.assert_allclose(stopped, np.maximum(p - q, 0), atol=1e-16)


@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize("width", [1, 2, 3])
def test_sibling_outcome_is_what_the_code_does(width, replacement):
    """The closed form against the real drafter and rule, enumerated at one node."""
    target, draft = pair(4, agreement=0.3)
    p, q = target.table[1], draft.table[1]

    def program(source):
        siblings = draw_siblings(q, width, replacement, source)
        tree = TokenTree(
            tuple(t for t, _ in siblings),
            (ROOT,) * len(siblings),
            np.array([r for _, r in siblings]),
        )
        emitted = verify_tree(np.tile(p, (len(siblings) + 1, 1)), tree, source).emitted
        return [emitted[0], len(emitted) - 1]  # the first token, and whether it was a draft

    enumeration = enumerate_outputs(program)
    accepted, stopped = sibling_outcome(p, q, width, replacement)
    assert accepted.sum() + stopped.sum() == pytest.approx(1, abs=1e-14)
    for token in range(4):
        assert enumeration.distribution.get((token, 1), 0) == pytest.approx(
            accepted[token], abs=1e-14
        )
        assert enumeration.distribution.get((token, 0), 0) == pytest.approx(
            stopped[token], abs=1e-14
        )


def test_fixed_pair_formula_reduces_to_the_iid_formula_for_a_chain():
    target, draft = pair(5)
    p, q = target.table[2], draft.table[2]
    alpha = float(np.minimum(p, q).sum())
    assert tree_tokens_per_pass(p, q, (1, 1, 1)) == pytest.approx(
        expected_tokens_per_pass(alpha, 3)
    )
    assert tree_tokens_per_pass(p, q, (3, 1, 1)) > tree_tokens_per_pass(p, q, (1, 1, 1))


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=0.6, top_p=0.9)])
def test_chain_shaped_tree_theory_equals_the_chain_theory(pair32, k, sampling):
    target, draft = pair32
    chain = markov_expectation(target, draft, k, sampling)
    for replacement in (True, False):
        tree = tree_markov_expectation(target, draft, (1,) * k, sampling, replacement)
        assert tree.tokens_per_pass == pytest.approx(chain.tokens_per_pass, rel=1e-12)
        assert tree.acceptance_rate == pytest.approx(chain.acceptance_rate, rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("widths", "replacement", "order"),
    [((3, 2, 1), True, 1), ((2, 2), False, 1), ((6,), True, 1), ((2, 1), False, 2)],
)
def test_measured_tokens_per_pass_within_three_percent_of_theory(widths, replacement, order):
    target = random_markov(32 if order == 1 else 8, seed=1, order=order)
    draft = draft_from_target(target, 0.5, seed=2)
    trace = generate_tree(target, draft, [0] * order, 4000, widths, rng(), replacement=replacement)
    expectation = tree_markov_expectation(target, draft, widths, replacement=replacement)
    assert trace.tokens_per_pass == pytest.approx(expectation.tokens_per_pass, rel=0.03)
    assert trace.accepted / trace.target_passes == pytest.approx(
        expectation.accepted_per_pass, rel=0.05
    )


@pytest.mark.slow
def test_tree_beats_the_chain_at_equal_drafted_tokens_when_acceptance_is_low():
    """At agreement 0.2 (alpha ~0.47) the 6-node tree (2,1,1) beats the 6-token chain; at 0.9 the
    chain wins: a wide tree cannot emit more than depth + 1 tokens per pass."""
    target = random_markov(32, seed=0)
    low = draft_from_target(target, 0.2, seed=1)
    tree = generate_tree(target, low, [0], 5000, (2, 1, 1), rng())
    chain = generate_speculative(target, low, [0], 5000, 6, rng())
    assert tree.proposed / tree.target_passes == pytest.approx(6, abs=0.01)  # 6 nodes a step
    assert tree.tokens_per_pass > 1.04 * chain.tokens_per_pass
    assert (
        tree_markov_expectation(target, low, (2, 1, 1)).tokens_per_pass
        > 1.05 * markov_expectation(target, low, 6).tokens_per_pass
    )
    high = draft_from_target(target, 0.9, seed=1)
    assert (
        tree_markov_expectation(target, high, (2, 1, 1)).tokens_per_pass
        < markov_expectation(target, high, 6).tokens_per_pass
    )


def test_theory_without_replacement_refuses_an_unaffordable_width(pair32):
    target, draft = pair32
    assert MAX_THEORY_BRANCHES < 32 * 32**4
    with pytest.raises(ValueError, match="branches"):
        tree_markov_expectation(target, draft, (5,), replacement=False)
