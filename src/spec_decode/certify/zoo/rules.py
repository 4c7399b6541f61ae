"""Broken verification rules that re-create exactness bugs shipped in real engines, and two
exact rules often wrongly suspected (:mod:`spec_decode.certify.zoo` lists them by name)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from spec_decode.core.randomness import RandomSource
from spec_decode.core.rules import exact_rule, residual
from spec_decode.core.sampling import SamplingParams


def _verify(
    p: np.ndarray,
    q: np.ndarray,
    draft_tokens: Sequence[int],
    rng: RandomSource,
    *,
    accept_prob: Callable[[np.ndarray, np.ndarray, int], float] = lambda p, q, x: p[x] / q[x],
    on_reject: Callable[[np.ndarray, np.ndarray, RandomSource], int] = (
        lambda p, q, rng: rng.categorical(residual(p, q))
    ),
    bonus: Callable[[np.ndarray, RandomSource], int] = lambda p, rng: rng.categorical(p),
) -> list[int]:
    """The standard accept/reject walk with one of its three decisions swapped out."""
    emitted: list[int] = []
    for position, token in enumerate(draft_tokens):
        if not rng.bernoulli(accept_prob(p[position], q[position], token)):
            emitted.append(on_reject(p[position], q[position], rng))
            return emitted
        emitted.append(int(token))
    emitted.append(bonus(p[len(draft_tokens)], rng))
    return emitted


# ---- broken rules ------------------------------------------------------------------------------


def resample_from_target(
    p: np.ndarray, q: np.ndarray, draft_tokens: Sequence[int], rng: RandomSource
) -> list[int]:
    """On rejection, sample from p instead of the residual normalize(max(p - q, 0)).

    The rejected token can come out again, so tokens the draft over-proposes are over-represented:
    the first token follows min(p, q) + (1 - sum min(p, q)) p instead of p.
    """
    return _verify(p, q, draft_tokens, rng, on_reject=lambda p, q, rng: rng.categorical(p))


def swapped_residual(
    p: np.ndarray, q: np.ndarray, draft_tokens: Sequence[int], rng: RandomSource
) -> list[int]:
    """On rejection, sample from normalize(max(q - p, 0)): the residual with the sign swapped.

    It puts the correction mass exactly where the draft was already too likely.
    """
    return _verify(
        p, q, draft_tokens, rng, on_reject=lambda p, q, rng: rng.categorical(residual(q, p))
    )


def unnormalised_residual(
    p: np.ndarray, q: np.ndarray, draft_tokens: Sequence[int], rng: RandomSource
) -> list[int]:
    """On rejection, inverse-CDF sample max(p - q, 0) *without* normalising it.

    A uniform u is compared with the running sum of an array that sums to the rejection mass
    (< 1); when u exceeds it, the code falls back to the last vocabulary entry. Uses ``uniform()``,
    so it cannot be enumerated: the auditor judges it statistically.
    """

    def on_reject(p: np.ndarray, q: np.ndarray, rng: RandomSource) -> int:
        cumulative = np.cumsum(np.maximum(p - q, 0.0))
        return int(min(np.searchsorted(cumulative, rng.uniform(), side="right"), len(p) - 1))

    return _verify(p, q, draft_tokens, rng, on_reject=on_reject)


def inverted_ratio(
    p: np.ndarray, q: np.ndarray, draft_tokens: Sequence[int], rng: RandomSource
) -> list[int]:
    """Accept a draft token with min(1, q(x)/p(x)) instead of min(1, p(x)/q(x)).

    Tokens the target likes more than the draft get rejected, and vice versa.
    """
    return _verify(
        p,
        q,
        draft_tokens,
        rng,
        accept_prob=lambda p, q, x: q[x] / p[x] if p[x] > 0 else 1.0,
    )


def bonus_from_draft(
    p: np.ndarray, q: np.ndarray, draft_tokens: Sequence[int], rng: RandomSource
) -> list[int]:
    """When every draft is accepted, draw the bonus token from the draft instead of the target.

    The bonus position has no draft row of its own, so the draft's last distribution is reused:
    after a fully accepted block the next token follows the draft's (stale) view, not the target's.
    """
    if not len(draft_tokens):
        return exact_rule(p, q, draft_tokens, rng).emitted
    return _verify(p, q, draft_tokens, rng, bonus=lambda p_bonus, rng: rng.categorical(q[-1]))


def retempered_target(
    p: np.ndarray, q: np.ndarray, draft_tokens: Sequence[int], rng: RandomSource
) -> list[int]:
    """The target is warped with different sampling controls from the draft's at verification.

    Here the verifier re-applies temperature 0.7 to the already-warped target, as engines did when
    a logits processor ran twice, or ran with the draft's controls, on the target's scores. The
    output then follows the re-warped target, not the one the user asked for.
    """
    warp = SamplingParams(temperature=0.7).warp
    return exact_rule(warp(p), q, draft_tokens, rng).emitted


def typical_acceptance(
    p: np.ndarray, q: np.ndarray, draft_tokens: Sequence[int], rng: RandomSource
) -> list[int]:
    """Medusa-style typical acceptance: keep x when p(x) > min(0.09, 0.3 exp(-H(p))).

    Inexact by design: it trades fidelity for acceptance, keeping plausible-but-unlikely tokens
    too often (entropy threshold after Cai et al. 2024, with Medusa's default constants).
    """

    def typical(p: np.ndarray, q: np.ndarray, x: int) -> float:
        support = p[p > 0]
        entropy = -float(np.sum(support * np.log(support)))
        return 1.0 if p[x] > min(0.09, 0.3 * np.exp(-entropy)) else 0.0

    return _verify(
        p, q, draft_tokens, rng, accept_prob=typical, on_reject=lambda p, q, rng: rng.categorical(p)
    )


def sample_match(
    p: np.ndarray, q: np.ndarray, draft_tokens: Sequence[int], rng: RandomSource
) -> list[int]:
    """Draw y from p; keep the draft x only if y == x, else emit y and stop. EXACT.

    Each emitted token is a fresh draw from p (accepted drafts equal that draw), so the output is
    the target's whatever q is; only acceptance suffers. Often wrongly suspected of bias.
    """
    emitted: list[int] = []
    for position, token in enumerate(draft_tokens):
        drawn = rng.categorical(p[position])
        emitted.append(drawn)
        if drawn != token:
            return emitted
    emitted.append(rng.categorical(p[len(draft_tokens)]))
    return emitted


def exact_up_to_three(
    p: np.ndarray, q: np.ndarray, draft_tokens: Sequence[int], rng: RandomSource
) -> list[int]:
    """Exact for up to three drafts; from the fourth on, a rejection resamples p, not the residual.

    Re-creates a bug that lives only in a code path for long blocks (a kernel specialised by
    block size): a grid that stops at k = 3 certifies it; at k >= 4 the fourth token is biased as
    in :func:`resample_from_target`.
    """

    def on_reject(position: int) -> np.ndarray:
        return p[position] if position >= 3 else residual(p[position], q[position])

    emitted: list[int] = []
    for position, token in enumerate(draft_tokens):
        if not rng.bernoulli(p[position, token] / q[position, token]):
            emitted.append(rng.categorical(on_reject(position)))
            return emitted
        emitted.append(int(token))
    emitted.append(rng.categorical(p[len(draft_tokens)]))
    return emitted


def greedy_accepts_all(
    p: np.ndarray,
    q: np.ndarray,
    draft_tokens: Sequence[int],
    rng: RandomSource,
    *,
    sampling: SamplingParams,
) -> list[int]:
    """Exact when sampling; at temperature 0 a 'fast path' keeps every draft unchecked.

    Engines branch on the sampling settings (greedy kernels); this branch emits the draft's argmax
    chain instead of the target's. Only an auditor that passes the settings sees it.
    """
    if sampling.greedy:
        return [*map(int, draft_tokens), int(np.argmax(p[len(draft_tokens)]))]
    return exact_rule(p, q, draft_tokens, rng).emitted
