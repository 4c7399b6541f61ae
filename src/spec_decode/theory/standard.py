"""What speculative decoding should achieve on a Markov model pair, exactly (needs scipy).

With a constant acceptance probability alpha per drafted token (Leviathan et al. 2023, eq. 1),
a step with k drafts emits (1 - alpha^(k+1)) / (1 - alpha) tokens on average
(:func:`spec_decode.drafting.policies.expected_tokens_per_pass`). Real and toy models
accept at a rate that varies with the context, and plugging the average alpha into that formula is
biased (it is concave in alpha). :func:`markov_expectation` instead computes the long-run figures
of a Markov model pair exactly, by following the chain of contexts at which steps begin.

Trees (:func:`spec_decode.drafting.speculative.generate_tree`) get the same treatment:
:func:`sibling_outcome` is the exact effect of verifying one node's candidates, and
:func:`tree_markov_expectation` follows the contexts through a walk whose acceptance depends on the
width at each depth.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from spec_decode.core.models import MarkovModel
from spec_decode.core.rules import residual
from spec_decode.core.sampling import SamplingParams
from spec_decode.core.tree import TreeShape


@dataclass(frozen=True)
class MarkovExpectation:
    """Exact long-run figures of speculative decoding on a Markov model pair.

    ``alpha`` is the acceptance probability averaged over the target's stationary distribution of
    contexts; ``tokens_per_pass`` and ``acceptance_rate`` are the exact long-run values for the
    generator (acceptance rate = accepted / proposed drafted tokens).
    """

    alpha: float
    k: int
    tokens_per_pass: float
    acceptance_rate: float

    def speedup(self, draft_cost: float) -> float:
        """Expected speedup under the cost model; every step drafts k tokens."""
        return self.tokens_per_pass / (draft_cost * self.k + 1)


#: Probability mass below which a walk's remaining depth is dropped. With acceptance at most a
#: per draft, the dropped tail contributes about D * NEGLIGIBLE / (1 - a) tokens (D: the depth
#: reached, 1e-14 relative at a = 0.95): far below any measurement, and it bounds the cost.
NEGLIGIBLE = 1e-18


def markov_expectation(
    target: MarkovModel,
    draft: MarkovModel,
    k: int,
    sampling: SamplingParams | None = None,
    start: int = 0,
) -> MarkovExpectation:
    """Exact long-run tokens per pass, acceptance and alpha for a Markov pair.

    From context s, accepting the drafted token x moves to context s+x with probability
    A[s, s+x] = min(p_s(x), q_s(x)); rejecting and emitting y has probability
    R[s, s+y] = max(p_s(y) - q_s(y), 0); the bonus token has P[s, s+y] = p_s(y). A step that
    starts at s therefore ends at s' with probability M = sum_{j<k} A^j R + A^k P, having emitted
    j + 1 tokens on the j-th term. The long-run tokens per pass is the expected emission under the
    stationary distribution of M (a renewal-reward argument), with no i.i.d. assumption.

    ``start`` is the context index generation starts from (0: the prefix ``[0] * order`` of every
    toy run). When M has several closed classes (greedy decoding, top-k 1) the long run depends on
    where it starts, so the distribution used is the limit of M's powers from ``start``, not an
    average over all classes. Cost: a walk stops deepening once the mass still accepting is
    below :data:`NEGLIGIBLE`, so an absurd k costs no more than the depth the drafts can reach.
    """
    check_pair(target, draft, k)
    sampling = sampling or SamplingParams()
    p, q = sampling.warp(target.rows), sampling.warp(draft.rows)
    return chain_expectation(target, p, np.minimum(p, q), k, start)


def check_pair(target: MarkovModel, draft: MarkovModel, k: int) -> None:
    """Refuse k < 1 and a pair whose vocabularies or orders differ."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if draft.table.shape != target.table.shape:
        raise ValueError("target and draft must share vocabulary size and order")


def chain_expectation(
    target: MarkovModel, p: np.ndarray, kept: np.ndarray, k: int, start: int = 0
) -> MarkovExpectation:
    """The long run of a chain rule that, from context s, keeps a drafted x with probability
    ``kept[s, x]`` (moving to s+x), and otherwise emits y with probability p_s(y) - kept[s, y]
    and stops; after k kept drafts it emits a bonus from ``p``. min(p, q) is the standard rule
    (p - min(p, q) = max(p - q, 0)); any rule whose emitted token is distributed as p has this
    form (:mod:`spec_decode.theory.coupled`)."""
    accept, reject, bonus = (_transition(target, w) for w in (kept, np.maximum(p - kept, 0.0), p))
    depth = min(k, _reachable_depth(float(kept.sum(axis=1).max())))
    emitted, accepted = _long_run([accept] * depth, [reject] * depth, bonus, start)
    contexts = _stationary(lambda row: bonus.T @ row, p.shape[0], start)
    alpha = float(contexts @ kept.sum(axis=1))
    return MarkovExpectation(alpha, k, emitted, accepted / k)


def _reachable_depth(max_acceptance: float) -> int:
    """How deep a chain walk keeps more than :data:`NEGLIGIBLE` mass when no context accepts a
    draft with probability above ``max_acceptance`` (unbounded when some context always does)."""
    if max_acceptance >= 1.0:
        return sys.maxsize
    if max_acceptance <= 0.0:
        return 1
    return int(np.ceil(np.log(NEGLIGIBLE) / np.log(max_acceptance))) + 1


def _long_run(
    accepts: list[sparse.csr_matrix],
    stops: list[sparse.csr_matrix],
    bonus: sparse.csr_matrix,
    start: int,
) -> tuple[float, float]:
    """Long-run (tokens emitted, drafts kept) per step of a walk that drafts ``len(accepts)`` deep.

    At depth j the walk keeps a draft and moves on with ``accepts[j]``, or stops after emitting
    j + 1 tokens with ``stops[j]``; past the last depth it emits a bonus with ``bonus``. The step's
    context-to-context matrix is M = sum_j A_0..A_(j-1) S_j + A_0..A_(D-1) P, and the figures are
    expectations under the limit of M's powers from the context ``start`` (renewal-reward). Mass
    still accepting below :data:`NEGLIGIBLE` is dropped, which bounds the cost of a deep walk.
    """
    ones = np.ones(bonus.shape[0])

    def step_end(row: np.ndarray) -> np.ndarray:  # row vector times M
        out = np.zeros_like(row)
        for accept, stop in zip(accepts, stops, strict=True):
            if row.sum() < NEGLIGIBLE:
                return out
            out += stop.T @ row
            row = accept.T @ row
        return out + bonus.T @ row

    limit = _stationary(step_end, bonus.shape[0], start)
    emitted, kept, reach = 0.0, 0.0, limit  # reach = limit A_0..A_(j-1): mass still accepting
    for j, (accept, stop) in enumerate(zip(accepts, stops, strict=True)):
        if reach.sum() < NEGLIGIBLE:
            return emitted, kept
        emitted += (j + 1) * float(reach @ (stop @ ones))
        reach = accept.T @ reach
        kept += float(reach.sum())
    emitted += (len(accepts) + 1) * float(reach.sum())
    return emitted, kept


def _transition(model: MarkovModel, weights: np.ndarray) -> sparse.csr_matrix:
    """Sparse context-to-context matrix: emitting x from context c moves to (c minus oldest) + x."""
    n_contexts, vocab = weights.shape
    rows = np.repeat(np.arange(n_contexts), vocab)
    cols = (rows * vocab + np.tile(np.arange(vocab), n_contexts)) % n_contexts
    return sparse.csr_matrix((weights.ravel(), (rows, cols)), shape=(n_contexts, n_contexts))


def _stationary(
    apply: Callable[[np.ndarray], np.ndarray],
    size: int,
    start: int,
    tol: float = 1e-14,
    max_iter: int = 100_000,
) -> np.ndarray:
    """Limiting row vector of a stochastic operator from the context ``start``, by lazy power
    iteration.

    The lazy chain (I + M) / 2 has the same stationary distributions and converges even when M is
    periodic. Starting from ``start`` (not from uniform) matters when M has several closed
    classes: the limit is then the one generation from ``start`` actually reaches.
    """
    dist = np.zeros(size)
    dist[start] = 1.0
    for _ in range(max_iter):
        new = 0.5 * (dist + apply(dist))
        new /= new.sum()
        if np.abs(new - dist).sum() < tol:
            return new
        dist = new
    raise RuntimeError("stationary distribution did not converge")


def sibling_outcome(
    p: np.ndarray, q: np.ndarray, width: int, replacement: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """What exact verification of ``width`` siblings drawn from ``q`` does at a node with target p.

    Returns ``(accepted, stopped)``: ``accepted[x]`` is the probability that the walk accepts a
    child with token x and descends into it, ``stopped[y]`` that every child is rejected and the
    final residual emits y; together they sum to 1. One sibling gives (min(p, q), max(p - q, 0)).

    With replacement the residual after each rejection does not depend on the rejected token, so
    the siblings are followed one after another. Without replacement the next sibling's row
    depends on which tokens were drawn, so the computation branches on each rejected token (cost
    grows like V^(width - 1); zero-probability branches are pruned); it mirrors
    :func:`~spec_decode.drafting.tree_drafters.draw_siblings`, including stopping early once q's
    support is used up.
    """
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    accepted, stopped = np.zeros_like(p), np.zeros_like(p)

    def visit(target: np.ndarray, row: np.ndarray, reach: float, left: int) -> None:
        kept = np.minimum(target, row)  # = row(x) * min(1, target(x) / row(x))
        accepted[:] += reach * kept
        rejected = row - kept  # probability of drawing x and rejecting it
        after = residual(target, row)
        if left == 1:
            stopped[:] += reach * rejected.sum() * after
        elif replacement:
            visit(after, row, reach * rejected.sum(), left - 1)
        else:
            for token in np.flatnonzero(rejected > 0):
                rest = row.copy()
                rest[token] = 0.0
                if rest.sum() > 0:
                    visit(after, rest / rest.sum(), reach * rejected[token], left - 1)
                else:  # q's support is used up: no further sibling is drawn
                    stopped[:] += reach * rejected[token] * after

    visit(p, q, 1.0, width)
    return accepted, stopped


def tree_tokens_per_pass(
    p: np.ndarray, q: np.ndarray, widths: tuple[int, ...], replacement: bool = True
) -> float:
    """Expected tokens per pass of a tree when every position has target ``p`` and draft ``q``.

    With a(w) the acceptance probability of w siblings (:func:`sibling_outcome`), a tree of widths
    w_0..w_(D-1) emits sum_{d=0..D} a(w_0) ... a(w_(d-1)) tokens on average; for a chain (all
    widths 1) this is the i.i.d. formula (1 - alpha^(k+1)) / (1 - alpha).
    """
    expected, reach = 1.0, 1.0
    for width in TreeShape(tuple(widths)).widths:
        reach *= float(sibling_outcome(p, q, width, replacement)[0].sum())
        expected += reach
    return expected


@dataclass(frozen=True)
class TreeExpectation:
    """Exact long-run figures of tree speculative decoding on a Markov model pair.

    ``tokens_per_pass`` and ``accepted_per_pass`` (drafts kept per step) are exact long-run
    values; the cost figures assume every step drafts the full shape (without replacement a node
    gets fewer children once the draft's support is used up, e.g. under top-k).
    """

    shape: TreeShape
    replacement: bool
    tokens_per_pass: float
    accepted_per_pass: float

    @property
    def acceptance_rate(self) -> float:
        """Drafts kept / drafts proposed."""
        return self.accepted_per_pass / self.shape.nodes

    def speedup(self, draft_cost: float) -> float:
        """Expected speedup under the cost model: one draft call per expanded position."""
        return self.tokens_per_pass / (draft_cost * self.shape.expansions + 1)


#: Most (contexts x V^(width - 1)) branches :func:`tree_markov_expectation` follows without
#: replacement (about 3 seconds per million).
MAX_THEORY_BRANCHES = 2_000_000


def tree_markov_expectation(
    target: MarkovModel,
    draft: MarkovModel,
    widths: tuple[int, ...] | TreeShape,
    sampling: SamplingParams | None = None,
    replacement: bool = True,
    start: int = 0,
) -> TreeExpectation:
    """Exact long-run tokens per pass of tree speculative decoding on a Markov pair.

    A step is a walk down the tree: at depth d from context s it keeps a child with token x, moving
    to s+x, with probability A_d[s, s+x] = accepted[x] of :func:`sibling_outcome` at width w_d, or
    stops after emitting y with S_d[s, s+y] = stopped[y]; past the last depth it emits a bonus.
    This is :func:`markov_expectation` with a different acceptance at every depth (a chain of k
    tokens, widths (1,) * k, gives exactly its figures). The subtree below an accepted child was
    drawn given that child alone, so its outcome depends only on the context and the depth.
    ``start`` is as in :func:`markov_expectation`.
    """
    shape = widths if isinstance(widths, TreeShape) else TreeShape(tuple(widths))
    if draft.table.shape != target.table.shape:
        raise ValueError("target and draft must share vocabulary size and order")
    branches = target.rows.shape[0] * target.vocab_size ** (max(shape.widths) - 1)
    if not replacement and branches > MAX_THEORY_BRANCHES:
        raise ValueError(
            f"exact theory without replacement branches on every rejected sibling: about "
            f"{branches:.2g} branches for width {max(shape.widths)} over {target.rows.shape[0]} "
            f"contexts (limit {MAX_THEORY_BRANCHES:.0g}); use narrower widths or replacement"
        )
    sampling = sampling or SamplingParams()
    p, q = sampling.warp(target.rows), sampling.warp(draft.rows)
    outcomes = {
        width: [sibling_outcome(p[s], q[s], width, replacement) for s in range(p.shape[0])]
        for width in set(shape.widths)
    }
    accepts, stops = (
        [_transition(target, np.array([o[part] for o in outcomes[w]])) for w in shape.widths]
        for part in (0, 1)
    )
    emitted, kept = _long_run(accepts, stops, _transition(target, p), start)
    return TreeExpectation(shape, replacement, emitted, kept)
