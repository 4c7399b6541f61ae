"""Broken drafters that re-create exactness bugs shipped in real engines, and one exact drafter
often wrongly suspected. Each is a plain callable (draft model, prefix, k, rng) -> (tokens, q)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from spec_decode.core.models import Model
from spec_decode.core.randomness import RandomSource
from spec_decode.core.sampling import SamplingParams
from spec_decode.drafting.lookup import lookup_continuation


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


def one_hot_drafter(
    model: Model, prefix: Sequence[int], k: int, rng: RandomSource
) -> tuple[list[int], np.ndarray]:
    """Proposes the draft's most likely token and honestly reports a one-hot q. EXACT.

    With q = one-hot(x) the rule accepts x with probability p(x) and otherwise samples
    normalize(p without x): a deterministic draft is fine as long as it says so.
    """
    tokens, _ = _draft(model, prefix, k, rng, pick=lambda q, rng: int(np.argmax(q)))
    return tokens, np.eye(model.vocab_size)[tokens].reshape(len(tokens), model.vocab_size)


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
    (:class:`~spec_decode.drafting.lookup.PromptLookupDrafter`).
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
