"""What speculative decoding should achieve: the i.i.d. formulas and the exact Markov expectation.

With a constant acceptance probability alpha per drafted token (Leviathan et al. 2023, eq. 1),
a step with k drafts emits (1 - alpha^(k+1)) / (1 - alpha) tokens on average. Real and toy models
accept at a rate that varies with the context, and plugging the average alpha into that formula is
biased (it is concave in alpha). :func:`markov_expectation` instead computes the long-run figures
of a Markov model pair exactly, by following the chain of contexts at which steps begin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from spec_decode.models import MarkovModel
from spec_decode.sampling import SamplingParams


def expected_tokens_per_pass(alpha: float, k: int) -> float:
    """(1 - alpha^(k+1)) / (1 - alpha): tokens per target pass at constant acceptance ``alpha``."""
    if alpha >= 1:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def expected_speedup(alpha: float, k: int, draft_cost: float) -> float:
    """Tokens per unit cost relative to target-only decoding, a draft call costing ``draft_cost``.

    (1 - alpha^(k+1)) / ((1 - alpha)(draft_cost * k + 1)).
    """
    return expected_tokens_per_pass(alpha, k) / (draft_cost * k + 1)


def optimal_k(alpha: float, draft_cost: float, k_max: int = 64) -> int:
    """The k in 1..k_max that maximises :func:`expected_speedup`."""
    return max(range(1, k_max + 1), key=lambda k: expected_speedup(alpha, k, draft_cost))


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


def markov_expectation(
    target: MarkovModel, draft: MarkovModel, k: int, sampling: SamplingParams | None = None
) -> MarkovExpectation:
    """Exact long-run tokens per pass, acceptance and alpha for a Markov pair.

    From context s, accepting the drafted token x moves to context s+x with probability
    A[s, s+x] = min(p_s(x), q_s(x)); rejecting and emitting y has probability
    R[s, s+y] = max(p_s(y) - q_s(y), 0); the bonus token has P[s, s+y] = p_s(y). A step that
    starts at s therefore ends at s' with probability M = sum_{j<k} A^j R + A^k P, having emitted
    j + 1 tokens on the j-th term. The long-run tokens per pass is the expected emission under the
    stationary distribution of M (a renewal-reward argument), with no i.i.d. assumption.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if draft.table.shape != target.table.shape:
        raise ValueError("target and draft must share vocabulary size and order")
    sampling = sampling or SamplingParams()
    p, q = sampling.warp(target.rows), sampling.warp(draft.rows)
    accept, reject, bonus = (
        _transition(target, w) for w in (np.minimum(p, q), np.maximum(p - q, 0), p)
    )
    ones = np.ones(p.shape[0])

    def step_end(row: np.ndarray) -> np.ndarray:  # row vector times M
        out = np.zeros_like(row)
        for _ in range(k):
            out += reject.T @ row
            row = accept.T @ row
        return out + bonus.T @ row

    start = _stationary(step_end, p.shape[0])
    emitted, kept, reach = 0.0, 0.0, start  # reach = start A^j: mass still accepting after j drafts
    for j in range(k):
        emitted += (j + 1) * float(reach @ (reject @ ones))
        reach = accept.T @ reach
        kept += float(reach.sum())
    emitted += (k + 1) * float(reach.sum())

    contexts = _stationary(lambda row: bonus.T @ row, p.shape[0])
    alpha = float(contexts @ np.minimum(p, q).sum(axis=1))
    return MarkovExpectation(alpha, k, emitted, kept / k)


def _transition(model: MarkovModel, weights: np.ndarray) -> sparse.csr_matrix:
    """Sparse context-to-context matrix: emitting x from context c moves to (c minus oldest) + x."""
    n_contexts, vocab = weights.shape
    rows = np.repeat(np.arange(n_contexts), vocab)
    cols = (rows * vocab + np.tile(np.arange(vocab), n_contexts)) % n_contexts
    return sparse.csr_matrix((weights.ravel(), (rows, cols)), shape=(n_contexts, n_contexts))


def _stationary(
    apply: Callable[[np.ndarray], np.ndarray],
    size: int,
    tol: float = 1e-14,
    max_iter: int = 100_000,
) -> np.ndarray:
    """Stationary row vector of a stochastic operator, by lazy power iteration from uniform.

    The lazy chain (I + M) / 2 has the same stationary distribution and converges even when M is
    periodic.
    """
    dist = np.full(size, 1.0 / size)
    for _ in range(max_iter):
        new = 0.5 * (dist + apply(dist))
        new /= new.sum()
        if np.abs(new - dist).sum() < tol:
            return new
        dist = new
    raise RuntimeError("stationary distribution did not converge")
