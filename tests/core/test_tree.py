"""Tree speculation: construction, the adjusted q, both certificates and their broken variants,
theory against measurement, and the tree-vs-chain trade-off.

Statistical tests: significance 1e-3 each; the sample size comes from ``samples_for_power`` so each
test detects any total-variation distance >= 0.06 over its cells with probability >= 0.99. They
use a peaked draft unrelated to the target, so rejections are frequent and siblings drawn without
replacement remove a lot of mass: the broken variants then differ from the target by TV > 0.1.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from spec_decode import (
    NumpySource,
    SamplingParams,
    draft_from_target,
    generate_autoregressive,
    generate_speculative,
    random_markov,
)
from spec_decode.certify.enumeration import enumerate_outputs
from spec_decode.certify.exhaustive import exact_tree_distribution
from spec_decode.certify.generators import tree_generator
from spec_decode.certify.goodness_of_fit import samples_for_power
from spec_decode.certify.reference import TV_TOLERANCE
from spec_decode.certify.statistical import statistical_certificate
from spec_decode.certify.zoo.trees import UnadjustedTreeDrafter, tree_without_residual_update
from spec_decode.cli.app import app
from spec_decode.core.tree import ROOT, TokenTree, TreeShape, score_tree
from spec_decode.core.tree_rules import verify_tree
from spec_decode.drafting.policies import expected_tokens_per_pass
from spec_decode.drafting.speculative import generate_tree
from spec_decode.drafting.tree_drafters import ModelTreeDrafter, draw_siblings
from spec_decode.theory.standard import (
    MAX_THEORY_BRANCHES,
    markov_expectation,
    sibling_outcome,
    tree_markov_expectation,
    tree_tokens_per_pass,
)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def pair(vocab: int, order: int = 1, agreement: float = 0.5):
    target = random_markov(vocab, seed=vocab + 10 * order, order=order)
    return target, draft_from_target(target, agreement, seed=99)


# ---- representation and drafting ---------------------------------------------------------------


def test_shape_counts_nodes_and_draft_calls():
    shape = TreeShape.parse("3,2,1")
    assert shape == TreeShape((3, 2, 1)) and str(shape) == "3,2,1"
    assert (shape.depth, shape.nodes, shape.expansions) == (3, 15, 10)
    chain = TreeShape((1,) * 4)
    assert (chain.nodes, chain.expansions) == (4, 4)  # a chain: one draft call per drafted token


@pytest.mark.parametrize(("text", "message"), [("3,x", "comma-separated"), ("2,0", ">= 1")])
def test_bad_shapes_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        TreeShape.parse(text)
    with pytest.raises(ValueError, match="at least one width"):
        TreeShape(())


def test_drafted_tree_has_the_requested_shape_in_breadth_first_order(pair32):
    _, draft = pair32
    tree = ModelTreeDrafter(draft).propose_tree([0], TreeShape((3, 2, 1)), NumpySource(rng()))
    assert tree.size == 15 and tree.depth == 3 and tree.expansions == 10
    assert tree.depths == (1,) * 3 + (2,) * 6 + (3,) * 6
    assert list(tree.children(ROOT)) == [0, 1, 2] and list(tree.children(0)) == [3, 4]
    assert tree.parents[3:9] == (0, 0, 1, 1, 2, 2) and tree.children(14) == range(0)
    for node in range(tree.size):  # with replacement every sibling reports its parent's draft row
        path = tree.path(node)
        assert path[-1] == tree.tokens[node] and len(path) == tree.depths[node]
        np.testing.assert_allclose(tree.q[node], draft.next_dist([0, *path[:-1]]), rtol=1e-12)


def test_without_replacement_reports_the_adjusted_q():
    q = np.array([0.5, 0.3, 0.15, 0.05])
    siblings = draw_siblings(q, 3, False, NumpySource(rng(3)))
    tokens = [t for t, _ in siblings]
    assert len(set(tokens)) == 3
    for i, (_, row) in enumerate(siblings):
        expected = q.copy()
        expected[tokens[:i]] = 0
        np.testing.assert_allclose(row, expected / expected.sum(), rtol=1e-15)
    # The support runs out: a node gets fewer children.
    assert len(draw_siblings(np.array([0.6, 0.4, 0, 0]), 3, False, NumpySource(rng()))) == 2


@pytest.mark.parametrize("replacement", [True, False])
def test_reported_rows_are_the_true_drawing_distribution(replacement):
    """Enumerated over every draw: the path probability is the product of the reported rows."""
    q = np.array([0.5, 0.3, 0.2])
    rows_seen: dict[tuple[int, ...], float] = {}

    def program(source):
        siblings = draw_siblings(q, 3, replacement, source)
        tokens = tuple(t for t, _ in siblings)
        rows_seen[tokens] = float(np.prod([row[t] for t, row in siblings]))
        return tokens

    enumeration = enumerate_outputs(program)
    assert enumeration.paths == (27 if replacement else 6)
    for tokens, prob in enumeration.distribution.items():
        assert prob == pytest.approx(rows_seen[tokens], rel=1e-14)


@pytest.mark.parametrize(
    ("tokens", "parents", "q", "message"),
    [
        ((0, 1), (ROOT,), np.full((2, 2), 0.5), "parent indices"),
        ((0, 1), (1, ROOT), np.full((2, 2), 0.5), "before its child"),
        ((0, 1, 1), (ROOT, 0, ROOT), np.full((3, 2), 0.5), "breadth-first"),
        ((0,), (ROOT,), np.full((2, 2), 0.5), "shape"),
        ((2,), (ROOT,), np.full((1, 2), 0.5), "lie in"),
        ((0,), (ROOT,), np.array([[0.0, 1.0]]), "probability 0"),
        ((0,), (ROOT,), np.array([[0.7, 0.7]]), "not normalised"),
    ],
)
def test_malformed_trees_are_refused(tokens, parents, q, message):
    with pytest.raises(ValueError, match=message):
        TokenTree(tokens, parents, q)


def test_score_tree_rows_follow_each_path_and_prefer_the_models_own_scorer(pair32):
    target, draft = pair32
    tree = ModelTreeDrafter(draft).propose_tree([0, 5], TreeShape((2, 2)), NumpySource(rng()))
    rows = score_tree(target, [0, 5], tree)
    assert rows.shape == (7, 32)
    np.testing.assert_array_equal(rows[0], target.next_dist([0, 5]))
    for node in range(tree.size):
        np.testing.assert_array_equal(rows[node + 1], target.next_dist([0, 5, *tree.path(node)]))

    calls = []

    class OnePass:
        vocab_size = 32

        def next_dist(self, prefix):
            raise AssertionError("a model with score_tree must be scored in one call")

        def score_tree(self, prefix, tokens, parents):
            calls.append((list(prefix), tokens, parents))
            return rows

    np.testing.assert_array_equal(score_tree(OnePass(), [0, 5], tree), rows)
    assert calls == [([0, 5], list(tree.tokens), list(tree.parents))]


# ---- generation mechanics ----------------------------------------------------------------------


def test_chain_shape_is_token_identical_to_the_chain_generator(pair32):
    target, draft = pair32
    chain = generate_speculative(target, draft, [0], 400, 3, rng(5))
    tree = generate_tree(target, draft, [0], 400, (1, 1, 1), rng(5))
    assert tree.tokens == chain.tokens
    assert tree.target_passes == chain.target_passes and tree.draft_calls == chain.draft_calls
    assert tree.accepted_lengths == chain.accepted_lengths


@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize("n_tokens", [0, 1, 2, 7, 60])
def test_emits_exactly_n_tokens_and_counts_the_cost(pair32, n_tokens, replacement):
    target, draft = pair32
    trace = generate_tree(target, draft, [0], n_tokens, (3, 2, 1), rng(), replacement=replacement)
    assert len(trace.tokens) == n_tokens
    assert trace.target_passes == len(trace.drafted_lengths) == len(trace.draft_call_counts)
    nodes, calls = {0: 0, 1: 3, 2: 9, 3: 15}, {0: 0, 1: 1, 2: 4, 3: 10}
    emitted = 0
    for drafted, expansions, kept in zip(
        trace.drafted_lengths, trace.draft_call_counts, trace.accepted_lengths, strict=True
    ):
        depth = min(3, n_tokens - emitted - 1)  # the last steps draft only what is still needed
        assert (drafted, expansions) == (nodes[depth], calls[depth])
        assert 0 <= kept <= depth
        emitted += kept + 1
    assert emitted == n_tokens
    assert trace.draft_calls == sum(trace.draft_call_counts)


@pytest.mark.parametrize("replacement", [True, False])
def test_greedy_tree_is_token_identical_to_greedy_decoding(replacement):
    target = random_markov(16, seed=3, order=2)
    draft = draft_from_target(target, 0.5, seed=4)
    greedy = SamplingParams(temperature=0)
    trace = generate_tree(
        target, draft, [0, 1], 150, (3, 2), rng(1), sampling=greedy, replacement=replacement
    )
    assert (
        trace.tokens == generate_autoregressive(target, [0, 1], 150, rng(2), sampling=greedy).tokens
    )


def test_bad_arguments_are_refused(pair32):
    target, draft = pair32
    with pytest.raises(ValueError, match="n_tokens"):
        generate_tree(target, draft, [0], -1, (2,), rng())
    with pytest.raises(ValueError, match="empty"):
        generate_tree(target, draft, [], 5, (2,), rng())
    with pytest.raises(ValueError, match="vocabulary"):
        generate_tree(target, random_markov(16, seed=0), [0], 5, (2,), rng())
    with pytest.raises(ValueError, match="draft model or a drafter"):
        generate_tree(target, None, [0], 5, (2,), rng())
    with pytest.raises(ValueError, match=">= 1"):
        generate_tree(target, draft, [0], 5, (2, 0), rng())


class _Deep:
    """A drafter that ignores the requested depth."""

    vocab_size = 32

    def propose_tree(self, prefix, shape, rng):
        return ModelTreeDrafter(random_markov(32, seed=1)).propose_tree(
            prefix, TreeShape((1,) * (shape.depth + 1)), rng
        )


class _NotATree:
    vocab_size = 32

    def propose_tree(self, prefix, shape, rng):
        return [1, 2], np.eye(32)[[1, 2]]


@pytest.mark.parametrize(("drafter", "message"), [(_Deep(), "deeper"), (_NotATree(), "TokenTree")])
def test_misbehaving_drafters_are_refused(pair32, drafter, message):
    target, _ = pair32
    with pytest.raises(ValueError, match=message):
        generate_tree(target, None, [0], 10, (2, 2), rng(), drafter=drafter)


def test_misbehaving_rules_and_scorers_are_refused(pair32):
    target, draft = pair32
    with pytest.raises(ValueError, match="between 1 and"):
        generate_tree(target, draft, [0], 10, (2, 2), rng(), rule=lambda p, t, r: [0] * 4)

    class ShortScorer:
        vocab_size = 32

        def next_dist(self, prefix):
            return target.next_dist(prefix)

        def score_tree(self, prefix, tokens, parents):
            return np.stack([target.next_dist(prefix)] * len(tokens))

    with pytest.raises(ValueError, match="target score has shape"):
        generate_tree(ShortScorer(), draft, [0], 10, (2, 2), rng())


# ---- exhaustive certificate --------------------------------------------------------------------

CONTROLS = {
    "plain": SamplingParams(),
    "temperature 0.7, top-k 2": SamplingParams(temperature=0.7, top_k=2),
    "top-p 0.8": SamplingParams(top_p=0.8),
    "greedy": SamplingParams(temperature=0),
}
#: (vocabulary, widths, tokens, Markov order): every case covers at least one full tree step.
CASES = [
    (2, (2, 1), 3, 1),
    (2, (2, 2), 3, 1),
    (3, (2,), 3, 1),
    (3, (2, 1), 3, 1),
    (3, (1, 2), 3, 1),
    (4, (2,), 2, 1),
    (4, (3,), 2, 1),
    (3, (3,), 2, 2),
    (2, (2, 1), 3, 2),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "replacement", "control"), list(itertools.product(CASES, [True, False], CONTROLS))
)
def test_tree_generator_is_exact(case, replacement, control):
    vocab, widths, n_tokens, order = case
    target, draft = pair(vocab, order)
    result = exact_tree_distribution(
        target,
        draft,
        [0] * order,
        n_tokens,
        widths,
        sampling=CONTROLS[control],
        replacement=replacement,
    )
    assert abs(result.total_probability - 1) < TV_TOLERANCE
    assert result.tv < TV_TOLERANCE


@pytest.mark.slow
@pytest.mark.parametrize("replacement", [True, False])
def test_tree_generator_is_exact_over_two_full_steps(replacement):
    target, draft = pair(3)
    result = exact_tree_distribution(target, draft, [0], 4, (2,), replacement=replacement)
    assert abs(result.total_probability - 1) < TV_TOLERANCE
    assert result.tv < TV_TOLERANCE


#: The broken variants of spec_decode.certify.zoo.trees, as generator arguments for a given draft
#: and controls.
BROKEN = {
    "residual not updated between siblings": lambda draft, sampling: {
        "rule": tree_without_residual_update
    },
    "without replacement, verified with the unadjusted q": lambda draft, sampling: {
        "drafter": UnadjustedTreeDrafter(draft, sampling)
    },
}


@pytest.mark.slow
@pytest.mark.parametrize("name", BROKEN)
@pytest.mark.parametrize("control", ["plain", "temperature 0.7"])
def test_exhaustive_certificate_fails_the_broken_variants(name, control):
    sampling = SamplingParams(temperature=0.7) if control != "plain" else SamplingParams()
    target, draft = pair(3)
    result = exact_tree_distribution(
        target, draft, [0], 3, (2, 1), sampling=sampling, **BROKEN[name](draft, sampling)
    )
    assert result.tv > 1e-3


def test_broken_residual_is_invisible_on_a_chain():
    """With one child per node the 'no update' rule IS the exact rule: only trees expose it."""
    target, draft = pair(3)
    result = exact_tree_distribution(
        target, draft, [0], 3, (1, 1), rule=tree_without_residual_update
    )
    assert result.tv < TV_TOLERANCE


# ---- statistical certificate -------------------------------------------------------------------

SIGNIFICANCE = 1e-3
DETECTABLE_TV = 0.06
RUNS = samples_for_power(cells=4 * 4, tv=DETECTABLE_TV, significance=SIGNIFICANCE, power=0.99)


@pytest.fixture
def peaked_pair():
    """A 4-token target and a peaked draft unrelated to it."""
    target = random_markov(4, seed=1)
    return target, draft_from_target(target, 0.0, seed=2, concentration=0.2)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("widths", "kwargs"),
    [
        ((2, 1), {}),
        ((3,), {"replacement": False, "sampling": SamplingParams(temperature=0.8, top_k=3)}),
    ],
)
def test_statistical_certificate_passes(peaked_pair, widths, kwargs):
    target, draft = peaked_pair
    generate = tree_generator(target, draft, [0], widths, **kwargs)
    depth = len(widths)
    certificate = statistical_certificate(
        generate,
        target,
        [0],
        depth,
        RUNS,
        seed=11,
        sampling=kwargs.get("sampling"),
        significance=SIGNIFICANCE,
    )
    assert certificate.passed, certificate.tests
    assert all(tv <= DETECTABLE_TV + 1e-9 for tv in certificate.detectable_tv.values())


@pytest.mark.slow
@pytest.mark.parametrize("name", BROKEN)
def test_statistical_certificate_fails_the_broken_variants(peaked_pair, name):
    target, draft = peaked_pair
    generate = tree_generator(target, draft, [0], (2,), **BROKEN[name](draft, SamplingParams()))
    certificate = statistical_certificate(
        generate, target, [0], 1, RUNS, seed=11, significance=SIGNIFICANCE
    )
    assert all(test.rejected for test in certificate.tests.values()), certificate.tests


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


# ---- command line ------------------------------------------------------------------------------


@pytest.mark.slow
def test_cli_run_tree():
    runner = CliRunner()
    result = runner.invoke(app, ["run", "--tree", "3,2,1", "--tokens", "600", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["widths"] == [3, 2, 1] and payload["drafted_per_step"] == 15
    assert payload["tokens"] == 600 and payload["draft_calls_per_step"] == 10
    for key in ("tokens_per_pass", "expected_tokens_per_pass", "chain_tokens_per_pass", "speedup"):
        assert key in payload
    text = runner.invoke(app, ["run", "--tree", "2,2", "--without-replacement", "--tokens", "300"])
    assert (
        text.exit_code == 0 and "chain k=6" in text.output and "tokens / target pass" in text.output
    )
    bad = runner.invoke(app, ["run", "--tree", "3,x"])
    assert bad.exit_code == 2 and "comma-separated" in bad.output
