"""Broken verification rules and drafters, re-creating exactness bugs that shipped in real engines.

Each entry re-creates one mechanism and says what it does to the output; ``spec-decode audit``
must FAIL every one (``BROKEN_RULES``, ``BROKEN_DRAFTERS``). Two controls that are exact, and often
wrongly suspected, must PASS (``EXACT_RULES``, ``EXACT_DRAFTERS``). Audit one by name, e.g.
``spec-decode audit spec_decode.zoo:inverted_ratio``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from spec_decode.lookup import lookup_continuation
from spec_decode.models import Model
from spec_decode.randomness import RandomSource
from spec_decode.rules import exact_rule, residual
from spec_decode.sampling import SamplingParams
from spec_decode.tree import ROOT, TokenTree, TreeShape
from spec_decode.tree_drafters import ModelTreeDrafter


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
        return exact_rule(p, q, draft_tokens, rng)
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
    return exact_rule(warp(p), q, draft_tokens, rng)


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


# ---- broken drafters (plain callables: draft model, prefix, k, rng -> tokens, q) ---------------


def _draft(
    model: Model,
    prefix: Sequence[int],
    k: int,
    rng: RandomSource,
    pick: Callable[[np.ndarray, RandomSource], int],
) -> tuple[list[int], np.ndarray]:
    """Autoregressive drafting where ``pick`` chooses each token from the draft's row."""
    context, tokens = list(prefix), []
    rows = np.empty((k, model.vocab_size))
    for i in range(k):
        rows[i] = model.next_dist(context)
        tokens.append(pick(rows[i], rng))
        context.append(tokens[-1])
    return tokens, rows


def argmax_drafter(
    model: Model, prefix: Sequence[int], k: int, rng: RandomSource
) -> tuple[list[int], np.ndarray]:
    """Proposes the draft's most likely token but reports the draft's full softmax as q.

    The token was not drawn from q (it is deterministic), so min(1, p/q) corrects for the wrong
    proposal distribution: the argmax token is under-accepted relative to how often it is proposed.
    """
    return _draft(model, prefix, k, rng, pick=lambda q, rng: int(np.argmax(q)))


def truncated_drafter(
    model: Model, prefix: Sequence[int], k: int, rng: RandomSource
) -> tuple[list[int], np.ndarray]:
    """Samples from the draft's top-2 truncated distribution but reports the untruncated q.

    Acceptance is computed against a q that is too small on the kept tokens by the truncated mass
    Z, so kept tokens are accepted up to 1/Z times too often.
    """
    truncate = SamplingParams(top_k=2).warp
    return _draft(model, prefix, k, rng, pick=lambda q, rng: rng.categorical(truncate(q)))


# ---- exact controls ----------------------------------------------------------------------------


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


def one_hot_drafter(
    model: Model, prefix: Sequence[int], k: int, rng: RandomSource
) -> tuple[list[int], np.ndarray]:
    """Proposes the draft's most likely token and honestly reports a one-hot q. EXACT.

    With q = one-hot(x) the rule accepts x with probability p(x) and otherwise samples
    normalize(p without x): a deterministic draft is fine as long as it says so.
    """
    tokens, _ = _draft(model, prefix, k, rng, pick=lambda q, rng: int(np.argmax(q)))
    return tokens, np.eye(model.vocab_size)[tokens].reshape(len(tokens), model.vocab_size)


#: Broken rules and drafters (the auditor must FAIL each), by name.
BROKEN_RULES = {
    "resample_from_target": resample_from_target,
    "swapped_residual": swapped_residual,
    "unnormalised_residual": unnormalised_residual,
    "inverted_ratio": inverted_ratio,
    "bonus_from_draft": bonus_from_draft,
    "retempered_target": retempered_target,
    "typical_acceptance": typical_acceptance,
}
BROKEN_DRAFTERS = {"argmax_drafter": argmax_drafter, "truncated_drafter": truncated_drafter}
#: Exact controls (the auditor must PASS each), by name.
EXACT_RULES = {"exact_rule": exact_rule, "sample_match": sample_match}
EXACT_DRAFTERS = {"one_hot_drafter": one_hot_drafter}


# ---- broken prompt-lookup and confidence cut-off drafters (adaptive speculation) ---------------

#: The probability below which :func:`confidence_after_draw` drops the token it drew.
DRAW_CUT_OFF = 0.5


def lookup_with_model_q(
    model: Model, prefix: Sequence[int], k: int, rng: RandomSource
) -> tuple[list[int], np.ndarray]:
    """Proposes the prompt-lookup continuation but reports the draft model's rows as its q.

    A combined drafter that copies tokens from the context and hands the verifier the draft
    model's probabilities for them, as if the model had drawn them. The copied tokens were not
    drawn from those rows, so the rule corrects for a proposal that never happened: a copied token
    x is accepted with probability min(1, p(x)/q(x)) instead of p(x) (too often), and a rejection
    draws from normalize(max(p - q, 0)) instead of p without x. The honest report is one-hot
    (:class:`~spec_decode.lookup.PromptLookupDrafter`).
    """
    tokens = lookup_continuation(prefix, 1, 3, k)
    context = list(prefix)
    rows = np.empty((len(tokens), model.vocab_size))
    for i, token in enumerate(tokens):
        rows[i] = model.next_dist(context)
        context.append(token)
    return tokens, rows


def confidence_after_draw(
    model: Model, prefix: Sequence[int], k: int, rng: RandomSource
) -> tuple[list[int], np.ndarray]:
    """A confidence cut-off that judges each token after drawing it: when the drawn token's own
    probability is below :data:`DRAW_CUT_OFF`, it is dropped and drafting stops.

    Whether a token is kept then depends on its value, so the kept tokens follow q restricted to
    {x : q(x) >= DRAW_CUT_OFF}, while q itself is reported: confident tokens are proposed more
    often than the verifier assumes and come out over-represented. The exact cut-off decides from
    the row before drawing (``ModelDrafter.min_confidence``).
    """
    context, tokens = list(prefix), []
    rows = np.empty((k, model.vocab_size))
    for i in range(k):
        rows[i] = model.next_dist(context)
        token = rng.categorical(rows[i])
        if rows[i, token] < DRAW_CUT_OFF:
            break
        tokens.append(token)
        context.append(token)
    return tokens, rows[: len(tokens)]


BROKEN_DRAFTERS.update(
    lookup_with_model_q=lookup_with_model_q, confidence_after_draw=confidence_after_draw
)


# ---- broken tree verification (multi-draft speculation, spec_decode.tree_speculative) ----------
# Tree rules take (p, tree, rng) and tree drafters propose a TokenTree, so these two are not in the
# chain registries above; tests/test_tree.py shows both certificates FAIL them.


def tree_without_residual_update(p: np.ndarray, tree: TokenTree, rng: RandomSource) -> list[int]:
    """Tree verification that tries every sibling against the node's own target row p, never
    taking a rejected sibling's q out of it; when all are rejected it samples the residual of p
    and the last sibling's q.

    Each sibling then gets a fresh chance at the mass p shares with q: a token both models like is
    accepted by the first sibling that carries it, then again by a later one after a rejection, so
    it comes out too often and the residual, taken once, cannot pay it back. With one child per
    node this is the exact chain rule: the bug only shows on trees with a width of 2 or more.
    """
    emitted: list[int] = []
    node = ROOT
    while True:
        target, children = p[node + 1], tree.children(node)
        for child in children:
            token = tree.tokens[child]
            if rng.bernoulli(target[token] / tree.q[child, token]):
                emitted.append(token)
                node = child
                break
        else:
            fallback = residual(target, tree.q[children[-1]]) if children else target
            emitted.append(rng.categorical(fallback))
            return emitted


@dataclass(frozen=True)
class UnadjustedTreeDrafter:
    """Draws siblings without replacement but reports every sibling as drawn from the unadjusted
    draft row q.

    The i-th sibling really comes from q with the earlier siblings removed and renormalised,
    q_i = q / (1 - q(x_1) - ...) off {x_1, ...}, which is larger than q on every remaining token.
    Verifying it against q accepts it with min(1, r(x)/q(x)) and takes q, not q_i, out of the
    residual: later siblings are accepted too often and the fallback no longer pays it back.
    """

    model: Model
    sampling: SamplingParams = field(default_factory=SamplingParams)

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    def propose_tree(self, prefix: Sequence[int], shape: TreeShape, rng: RandomSource) -> TokenTree:
        drafter = ModelTreeDrafter(self.model, self.sampling, replacement=False)
        tree = drafter.propose_tree(prefix, shape, rng)
        first_sibling = [tree.children(parent).start for parent in tree.parents]
        return TokenTree(tree.tokens, tree.parents, tree.q[first_sibling])
