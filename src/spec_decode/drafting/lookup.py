"""Prompt lookup: drafting by copying from the context, with no draft model at all.

Text that edits, quotes or repeats its context (code changes, summaries with quotations, answers
that reuse names from the prompt) often continues the way an earlier occurrence of its last few
tokens continued. The prompt-lookup drafter finds the most recent earlier occurrence of the last n
tokens (prompt and generated text alike) and proposes what followed it.

The proposal is a deterministic function of the prefix, so the drafter reports one-hot q rows: the
exact rule then accepts a proposed token x with probability p(x) and, on rejection, samples
normalize(max(p - onehot(x), 0)), that is p with x removed. Reporting any other q (a model's
probabilities, say) for a token that was not drawn from it breaks exactness; see
:mod:`spec_decode.certify.zoo`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from spec_decode.drafting.drafters import OneHotProposals


def recurring_suffix(
    context: Sequence[int], min_ngram: int, max_ngram: int
) -> tuple[int, np.ndarray]:
    """The longest n from ``max_ngram`` down to ``min_ngram`` whose last n tokens of ``context``
    occur earlier in it, and where each earlier occurrence starts (ascending; an occurrence may
    overlap the final n tokens themselves); ``(0, [])`` when no n recurs."""
    tokens = np.asarray(context, dtype=np.int64)
    length = tokens.size
    for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        # starts[j]: tokens[j : j + n] equals the last n tokens, for j = 0 .. length - n - 1
        starts = np.ones(length - n, dtype=bool)
        for offset in range(n):
            starts &= tokens[offset : length - n + offset] == tokens[length - n + offset]
        found = np.flatnonzero(starts)
        if found.size:
            return n, found
    return 0, np.empty(0, dtype=np.int64)


def lookup_continuation(
    context: Sequence[int], min_ngram: int, max_ngram: int, max_tokens: int
) -> list[int]:
    """What followed the most recent earlier occurrence of the context's last n tokens.

    Tries n = ``max_ngram`` down to ``min_ngram`` (longer matches are more specific) and returns
    up to ``max_tokens`` tokens that followed the latest earlier occurrence of the first n that
    occurs (:func:`recurring_suffix`). Returns ``[]`` when no n matches or ``max_tokens`` is 0.
    """
    if max_tokens < 1:
        return []
    n, found = recurring_suffix(context, min_ngram, max_ngram)
    if not found.size:
        return []
    begin = int(found[-1]) + n
    return [int(t) for t in context[begin : begin + max_tokens]]


@dataclass(frozen=True)
class PromptLookupDrafter(OneHotProposals):
    """Proposes the continuation of the most recent earlier occurrence of the last n tokens.

    Parameters
    ----------
    vocab_size
        The target's vocabulary size (the drafter has no model of its own).
    min_ngram, max_ngram
        The n-gram lengths tried, longest first.
    max_tokens
        The most tokens proposed in one step (also never more than the step's k).

    Proposes nothing when no n-gram recurs, which makes the step one plain target pass. Draws no
    randomness: the q rows are one-hot.
    """

    vocab_size: int
    min_ngram: int = 1
    max_ngram: int = 3
    max_tokens: int = 10

    def __post_init__(self) -> None:
        if self.vocab_size < 1:
            raise ValueError(f"vocab_size must be >= 1, got {self.vocab_size}")
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(
                f"need 1 <= min_ngram <= max_ngram, got min_ngram={self.min_ngram}, "
                f"max_ngram={self.max_ngram}"
            )
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")

    def propose_tokens(self, prefix: Sequence[int], k: int) -> list[int]:
        """The proposed tokens alone, without q (a
        :class:`~spec_decode.drafting.drafters.DeterministicDrafter`)."""
        return lookup_continuation(prefix, self.min_ngram, self.max_ngram, min(k, self.max_tokens))
