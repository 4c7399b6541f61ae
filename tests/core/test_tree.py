"""Tree speculation: construction, the adjusted q, generation mechanics and the command line
(the certificates: test_tree_certificates.py; theory against measurement: test_tree_theory.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tree_pairs import rng
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
from spec_decode.cli.app import app
from spec_decode.core.tree import ROOT, TokenTree, TreeShape, score_tree
from spec_decode.drafting.speculative import generate_tree
from spec_decode.drafting.tree_drafters import ModelTreeDrafter, draw_siblings

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
