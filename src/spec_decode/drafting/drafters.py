"""Drafters: propose k tokens and report the distributions they were drawn from.

A drafter (:class:`~spec_decode.core.protocols.Drafter`) has a ``vocab_size`` and
``propose(prefix, k, rng) -> (tokens, q)`` with ``q`` of shape
(len(tokens), V). It may propose fewer than ``k`` tokens (none at all means one plain target
step). Exactness needs only that each token really was drawn from the ``q`` row reported for it;
a deterministic drafter reports one-hot rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from spec_decode.core.distributions import check_distributions
from spec_decode.core.models import Model
from spec_decode.core.noise import require_positional
from spec_decode.core.protocols import Drafter
from spec_decode.core.randomness import RandomSource
from spec_decode.core.sampling import SamplingParams


class OneHotProposals:
    """Gives a deterministic drafter its ``propose``: its ``propose_tokens`` with one-hot q rows,
    the honest report of a proposal that was not sampled (the exact rule then accepts x with
    probability p(x))."""

    vocab_size: int

    def propose_tokens(self, prefix: Sequence[int], k: int) -> list[int]:
        raise NotImplementedError

    def propose(
        self, prefix: Sequence[int], k: int, rng: RandomSource
    ) -> tuple[list[int], np.ndarray]:
        tokens = self.propose_tokens(prefix, k)
        return tokens, one_hot_rows(tokens, self.vocab_size)


def one_hot_rows(tokens: Sequence[int], vocab_size: int) -> np.ndarray:
    """The q rows of a deterministic proposal: shape (len(tokens), vocab_size), one 1 per row."""
    rows = np.zeros((len(tokens), vocab_size))
    rows[np.arange(len(tokens)), np.asarray(tokens, dtype=np.int64)] = 1.0
    return rows


@dataclass(frozen=True)
class ModelDrafter:
    """Samples up to ``k`` tokens autoregressively from a draft model under the sampling controls.

    ``min_confidence`` is a draft-confidence cut-off (llama.cpp's ``p_min``): drafting stops
    before position i when the draft model's largest probability there is below it, so the draft
    does not spend calls, nor the target its block, on positions where it is unsure. The decision
    reads only that distribution, which is fixed before the token is drawn, so every proposed
    token is still a plain draw from the row reported for it and exactness is untouched.
    (Judging the token *after* drawing it and dropping it when its own probability is low would
    bias the proposals; :mod:`spec_decode.certify.zoo` keeps that bug.) The cut-off acts inside
    drafting, which is why it is a drafter option and not a k policy: a policy only sees finished
    steps. It reads the model's raw distribution, not the warped one: at temperature 0 warped rows
    are one-hot and the cut-off would never fire. The declined row costs a draft call that
    ``Trace.draft_calls`` (which counts drafted tokens) leaves out.

    ``coupled`` draws the token at step offset i with the noise of that position,
    x_i = S(q_i, xi_i), the draft the coupled rule (:mod:`spec_decode.core.coupled`) accepts most
    often; it needs a positional source.
    """

    model: Model
    sampling: SamplingParams = field(default_factory=SamplingParams)
    min_confidence: float = 0.0
    coupled: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.min_confidence <= 1:
            raise ValueError(f"min_confidence must lie in [0, 1], got {self.min_confidence}")

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    def unread(self, context: Sequence[int]) -> int:
        """Tokens of ``context`` the draft model reads before its first draft: those its cache
        does not hold (0 for a model that keeps no cache it reports)."""
        unread = getattr(self.model, "unread", None)
        return 0 if unread is None else unread(context)

    def propose(
        self, prefix: Sequence[int], k: int, rng: RandomSource
    ) -> tuple[list[int], np.ndarray]:
        context = list(prefix)
        tokens: list[int] = []
        rows = np.empty((k, self.vocab_size))
        for i in range(k):
            raw = check_distributions(
                self.model.next_dist(context), self.vocab_size, "draft distribution"
            )
            if raw.max() < self.min_confidence:
                break
            rows[i] = self.sampling.warp(raw)
            if self.coupled:
                tokens.append(require_positional(rng).noise(i).choose(rows[i]))
            else:
                tokens.append(rng.categorical(rows[i]))
            context.append(tokens[-1])
        return tokens, rows[: len(tokens)]


@dataclass(frozen=True)
class FallbackDrafter:
    """Asks ``first`` for a proposal and, only when it proposes nothing, asks ``fallback``.

    The usual pairing is prompt lookup first (free, and long when it matches) with a model drafter
    behind it. Which drafter answers depends only on the prefix and on ``first``'s own draws, and
    each reports the q it drew from, so the combination is exact whenever both parts are.
    """

    first: Drafter
    fallback: Drafter

    def __post_init__(self) -> None:
        if self.first.vocab_size != self.fallback.vocab_size:
            raise ValueError(
                f"the two drafters' vocabularies differ ({self.first.vocab_size} and "
                f"{self.fallback.vocab_size})"
            )

    @property
    def vocab_size(self) -> int:
        return self.first.vocab_size

    def propose(
        self, prefix: Sequence[int], k: int, rng: RandomSource
    ) -> tuple[list[int], np.ndarray]:
        tokens, q = self.first.propose(prefix, k, rng)
        if len(tokens):
            return tokens, q
        return self.fallback.propose(prefix, k, rng)
