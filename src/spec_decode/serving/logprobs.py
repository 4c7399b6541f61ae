"""Log-probabilities of the emitted tokens, read from the very rows the target computed for them.

A speculative step scores the context and its drafts in one pass; the rows of the tokens it
emits are the target's distributions at those positions, which on an exact build are bitwise
the rows target-only decoding computes one token at a time. So the log-probabilities a request
reports are target-only decoding's, whatever was drafted. :class:`RowRecorder` stands in for the
target during such a request: it hands every row the steps ask for through, remembering the
latest row at each position (a later row for a position, such as a near-tie settled exactly,
replaces an earlier one), and :meth:`RowRecorder.take` turns the emitted tokens' rows into
:class:`TokenLogprob` s.

The log-probabilities are those of the rows the request's processors gave (its penalties, logit
bias and grammar: :mod:`spec_decode.core.processors`; the target's raw rows without them), before
temperature, top-k, top-p and min-p, as vLLM reports its raw log-probabilities; a token of
probability 0 is given :data:`FLOOR`, as the OpenAI API does, since JSON has no minus infinity.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spec_decode.core.models import score

#: The most alternatives a token's entry may list (the OpenAI API's limit).
MAX_TOP_LOGPROBS = 20
#: The log-probability reported for a token of probability 0.
FLOOR = -9999.0


@dataclass(frozen=True)
class TokenLogprob:
    """An emitted token's log-probability, and the ``top`` most likely tokens at its position
    as (token id, log-probability), most likely first."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def _log(p: float) -> float:
    return float(np.log(p)) if p > 0 else FLOOR


class RowRecorder:
    """``model`` for the steps of one request, remembering the row it gave at each position.

    It offers ``next_dist``, ``score`` and ``exact_dist`` (recorded) and every other attribute
    of the model except ``top_tokens`` and ``score_tree``: greedy steps then read the top tokens
    off the recorded rows (the same tokens, :func:`~spec_decode.core.models.greedy_tokens`), and
    a token tree, whose rows belong to nodes rather than positions, is not recorded.
    """

    _HIDDEN = frozenset({"top_tokens", "score_tree"})

    def __init__(self, model: Any, top: int = 0) -> None:
        if not 0 <= top <= MAX_TOP_LOGPROBS:
            raise ValueError(f"top must lie in [0, {MAX_TOP_LOGPROBS}], got {top}")
        self.model, self.top = model, top
        self.vocab_size = int(model.vocab_size)
        self._rows: dict[int, np.ndarray] = {}  # position of the token -> its distribution

    def next_dist(self, prefix: Sequence[int]) -> np.ndarray:
        row = self.model.next_dist(prefix)
        self._rows[len(prefix)] = row
        return row

    def score(self, prefix: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        rows = score(self.model, prefix, tokens)
        for i, row in enumerate(rows):
            self._rows[len(prefix) + i] = row
        return rows

    def exact_dist(self, prefix: Sequence[int]) -> np.ndarray:
        row = self.model.exact_dist(prefix)
        self._rows[len(prefix)] = row
        return row

    def __getattr__(self, name: str) -> Any:
        if name in self._HIDDEN:
            raise AttributeError(name)
        return getattr(self.model, name)

    def take(self, first: int, tokens: Sequence[int]) -> list[TokenLogprob]:
        """The entries of ``tokens``, emitted at positions ``first``, ``first + 1``, ...; every
        remembered row is then forgotten (the next step scores its own)."""
        entries = [self._entry(self._rows[first + i], int(t)) for i, t in enumerate(tokens)]
        self._rows.clear()
        return entries

    def _entry(self, row: np.ndarray, token: int) -> TokenLogprob:
        if not self.top:
            return TokenLogprob(token, _log(row[token]))
        best = np.argpartition(row, -self.top)[-self.top :]
        best = best[np.lexsort((best, -row[best]))]  # most likely first, then the lowest id
        top = tuple((int(t), _log(row[t])) for t in best)
        return TokenLogprob(token, _log(row[token]), top)
