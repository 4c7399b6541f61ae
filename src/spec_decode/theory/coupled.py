"""What the coupled rule accepts, exactly: closed forms for one position and the long run on a
Markov pair (the standard rule's are in :mod:`spec_decode.theory.standard`).

Under the coupled rule (:mod:`spec_decode.core.coupled`) a draft x = S(q, xi) is accepted when the
target's y = S(p, xi) equals it, so the acceptance probability at a position is the mass of the
coupling on the diagonal, sum_i P(x = y = i):

* **race** (argmin_i E_i / p_i and argmin_i E_i / q_i with one E): both pick i exactly when
  E_j > E_i max(p_j / p_i, q_j / q_i) for every j, so P(x = y = i) = 1 / sum_j max(p_j / p_i,
  q_j / q_i) (Daliri, Musco, Suresh 2024), at least (1 - TV) / (1 + TV) in all. Sorting by p/q
  turns the sum into two cumulative sums: O(V log V).
* **two-level race**: the blocks race by mass with their own noise, then the entries of the block
  both picked, so P(x = y = i) = (block race on the block masses)_b(i) * (race on the block's
  normalised rows)_i.
* **inverse CDF** (one uniform): the overlap of i's cumulative intervals under p and under q.

A one-hot draft of x is accepted with probability p(x) under every sampler, as under the standard
rule. :func:`coupled_markov_expectation` follows the chain of contexts exactly as
:func:`~spec_decode.theory.standard.markov_expectation` does, with min(p, q) replaced by the
coupling's diagonal and the rejection row max(p - q, 0) by p minus it (a rejection emits y,
distributed as p, on the event y != x).
"""

from __future__ import annotations

import numpy as np

from spec_decode.core.models import MarkovModel
from spec_decode.core.samplers import NOISE_BLOCK
from spec_decode.core.sampling import SamplingParams
from spec_decode.theory.standard import MarkovExpectation, chain_expectation, check_pair

#: The samplers with a closed form here (the names of :data:`spec_decode.core.noise.SAMPLERS`).
MATCH_SAMPLERS = ("race", "flat-race", "inverse-cdf")


def race_match(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """P(x = y = i) for every i when x and y race over q and p with the same exponentials."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    p, q = p / p.sum(), q / q.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(q > 0, p / q, np.inf)
    order = np.argsort(-ratio, kind="stable")  # largest p/q first
    ahead_p = np.empty_like(p)
    ahead_q = np.empty_like(q)
    ahead_p[order] = np.cumsum(p[order])  # mass of p over j with p_j/q_j >= p_i/q_i
    ahead_q[order] = np.cumsum(q[order])
    both = (p > 0) & (q > 0)
    match = np.zeros_like(p)
    total = ahead_p[both] / p[both] + (1.0 - ahead_q[both]) / q[both]
    match[both] = 1.0 / total
    return match


def two_level_race_match(p: np.ndarray, q: np.ndarray, block: int = NOISE_BLOCK) -> np.ndarray:
    """P(x = y = i) for the two-level race of :class:`~spec_decode.core.samplers.RaceNoise`."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    p, q = p / p.sum(), q / q.sum()
    starts = range(0, p.size, block)
    p_blocks = np.array([p[s : s + block].sum() for s in starts])
    q_blocks = np.array([q[s : s + block].sum() for s in starts])
    blocks = race_match(p_blocks, q_blocks)
    match = np.zeros_like(p)
    for b, s in enumerate(starts):
        if blocks[b] > 0:
            match[s : s + block] = blocks[b] * race_match(p[s : s + block], q[s : s + block])
    return match


def inverse_cdf_match(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """P(x = y = i) when x and y are located by one uniform in q's and p's cumulative sums."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    cp, cq = np.cumsum(p / p.sum()), np.cumsum(q / q.sum())
    low = np.maximum(np.concatenate(([0.0], cp[:-1])), np.concatenate(([0.0], cq[:-1])))
    return np.maximum(np.minimum(cp, cq) - low, 0.0)


def coupling_match(p: np.ndarray, q: np.ndarray, sampler: str = "race") -> np.ndarray:
    """P(x = y = i) under ``sampler``: the coupled rule's acceptance of a drafted i."""
    if sampler == "race":
        return two_level_race_match(p, q)
    if sampler == "flat-race":
        return race_match(p, q)
    if sampler == "inverse-cdf":
        return inverse_cdf_match(p, q)
    raise ValueError(f"sampler must be one of {', '.join(MATCH_SAMPLERS)}, got {sampler!r}")


def coupled_markov_expectation(
    target: MarkovModel,
    draft: MarkovModel,
    k: int,
    sampling: SamplingParams | None = None,
    sampler: str = "race",
    start: int = 0,
) -> MarkovExpectation:
    """Exact long-run tokens per pass, acceptance and alpha of the coupled rule on a Markov pair,
    the draft drawing with the same noise (``ModelDrafter(coupled=True)``).

    From context s, the drafted token is kept and the context moves to s+i with probability
    m_s(i) = P(x = y = i); a rejection emits y = i with probability p_s(i) - m_s(i); the bonus
    emits p_s. Each position's noise is independent of everything before it, so steps form the
    same chain of contexts as under the standard rule (see :mod:`spec_decode.theory.standard`).
    """
    check_pair(target, draft, k)
    sampling = sampling or SamplingParams()
    p, q = sampling.warp(target.rows), sampling.warp(draft.rows)
    match = np.array([coupling_match(p_s, q_s, sampler) for p_s, q_s in zip(p, q, strict=True)])
    return chain_expectation(target, p, match, k, start)
