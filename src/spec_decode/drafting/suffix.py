"""Suffix decoding: model-free drafts from the most frequent continuation of the context's suffix.

SuffixDecoding (Oliaro et al., arXiv 2411.04975) indexes earlier text in a suffix tree with an
occurrence count at every node. To draft, it matches the longest suffix of the current context
that occurred before, then follows the most frequent child again and again; the fraction of the
node's continued occurrences that went to that child is the empirical probability the text
continues that way, and drafting stops once the product of these probabilities (the empirical
chance the whole draft is right) falls below a threshold.

:class:`SuffixIndex` gives the same counts as that suffix tree, cut at ``depth`` tokens, without
building it: it keeps the tokens in one array and finds a substring's occurrences by scanning
it (:class:`Occurrences`, vectorised, narrowing the candidates one token at a time). Appending
is free, which matters because a long prompt is indexed before its request's second token and
every finished request is added to the shared history; a match costs one comparison over the
array and then work proportional to the occurrences. Memory is one integer a token, where the
tree held up to ``depth`` nodes.

:class:`SuffixDrafter` indexes the prompt and the output so far and, optionally, reads a
:class:`SuffixHistory` shared across requests in one process: the finished sequences of earlier
requests (SuffixDecoding's global tree; agentic workloads repeat themselves across requests). Its
proposal is a deterministic function of the context and of the history as it stood when the
request began, so it reports one-hot q rows and the exact rule stays exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from spec_decode.drafting.drafters import OneHotProposals

#: The most tokens a shared history keeps (8 bytes each); older requests are forgotten first.
MAX_HISTORY = 1 << 20
#: Stands between documents in the index: no token equals it, so no match spans two documents.
SEPARATOR = -1


def followed(tokens: np.ndarray, after: np.ndarray) -> np.ndarray:
    """The positions in ``after`` that hold a token of the same document: an occurrence ending
    just before one was followed by something."""
    after = after[after < tokens.size]
    return after[tokens[after] != SEPARATOR]


@dataclass(frozen=True, eq=False)
class Occurrences:
    """Where a substring of ``length`` tokens occurred and was followed by a token:
    ``after[i]`` is the index, in ``tokens``, of the token that followed occurrence i."""

    tokens: np.ndarray
    after: np.ndarray
    length: int
    depth: int

    @property
    def continued(self) -> int:
        """How often the substring was followed by a token (within the index's depth)."""
        return int(self.after.size) if self.length < self.depth else 0

    def child(self, token: int) -> Occurrences:
        """The occurrences of the substring extended by ``token``, as followed by a token."""
        after = followed(self.tokens, self.after[self.tokens[self.after] == token] + 1)
        return Occurrences(self.tokens, after, self.length + 1, self.depth)


class SuffixIndex:
    """Occurrence counts of every substring of at most ``depth`` tokens of a growing sequence
    (and of earlier sequences, :meth:`start_document`)."""

    def __init__(self, depth: int) -> None:
        if depth < 2:
            raise ValueError(f"depth must be >= 2, got {depth}")
        self.depth = depth
        self.tokens: list[int] = []  # the current document
        self._array = np.empty(1024, dtype=np.int64)  # every document, separated
        self._size = 0

    def extend(self, tokens: Sequence[int]) -> None:
        """Append ``tokens`` to the current document."""
        self._append(tokens)
        self.tokens.extend(int(token) for token in tokens)

    def start_document(self) -> None:
        """Begin a new sequence: later tokens form substrings with each other only."""
        if self._size:
            self._append([SEPARATOR])
        self.tokens = []

    def forget_oldest(self, keep: int) -> None:
        """Drop the oldest tokens, whole documents where it can, until at most ``keep`` remain
        (the current document's :attr:`tokens` are not touched)."""
        if self._size <= keep:
            return
        cut = self._size - keep
        separators = np.flatnonzero(self._array[cut : self._size] == SEPARATOR)
        if separators.size:
            cut += int(separators[0]) + 1
        kept = self._array[cut : self._size].copy()
        self._array[: kept.size] = kept
        self._size = kept.size

    def _append(self, tokens: Sequence[int]) -> None:
        needed = self._size + len(tokens)
        if needed > self._array.size:
            grown = np.empty(max(needed, 2 * self._array.size), dtype=np.int64)
            grown[: self._size] = self._array[: self._size]
            self._array = grown
        self._array[self._size : needed] = tokens
        self._size = needed

    def longest_match(
        self, context: Sequence[int], max_match: int, min_match: int
    ) -> tuple[int, Occurrences | None]:
        """The longest suffix of ``context`` (``min_match`` to ``max_match`` tokens) that was
        followed by something here: its length and occurrences, or (0, None)."""
        longest = min(max_match, len(context), self.depth - 1)
        if longest < min_match or longest < 1:
            return 0, None
        array = self._array[: self._size]
        suffix = np.asarray(context[len(context) - longest :], dtype=np.int64)
        after = followed(array, np.flatnonzero(array == suffix[-1]) + 1)  # of the last token
        found: tuple[int, Occurrences | None] = (0, None)
        for m in range(1, longest + 1):
            if m > 1:  # narrow to the occurrences preceded by the suffix's next token back
                after = after[after > m - 1]
                after = after[array[after - m] == suffix[-m]]
            if not after.size:
                break
            if m >= min_match:
                found = (m, Occurrences(array, after, m, self.depth))
        return found


def continuation(node: Occurrences | None, max_tokens: int, min_probability: float) -> list[int]:
    """The most frequent continuation after ``node``: follows the most frequent next token
    (lowest id on ties) while the product of the empirical continuation frequencies
    count(token) / continued(node) stays >= ``min_probability``, for at most ``max_tokens``
    tokens (and never deeper than the index)."""
    tokens: list[int] = []
    probability = 1.0
    while node is not None and node.continued and len(tokens) < max_tokens:
        if node.after.size == 1:  # one occurrence: what followed it, every frequency being 1
            begin = int(node.after[0])
            room = min(max_tokens - len(tokens), node.depth - node.length)
            text = node.tokens[begin : begin + room]
            ends = np.flatnonzero(text == SEPARATOR)
            return tokens + text[: ends[0] if ends.size else text.size].tolist()
        values, counts = np.unique(node.tokens[node.after], return_counts=True)
        best = int(np.argmax(counts))  # the first of the most frequent: the lowest id
        probability *= counts[best] / node.continued
        if probability < min_probability:
            break
        tokens.append(int(values[best]))
        node = node.child(tokens[-1])
    return tokens


class SuffixHistory:
    """Finished token sequences of earlier requests, indexed once and shared by the suffix
    drafters of later requests in the same process.

    Add a request's sequence (prompt and output) with :meth:`add` after it finished, never while
    a drafter reading this history is in the middle of a request: a proposal must not depend on
    the request's own future. A drafter checks this (:attr:`version`) and raises if it happens.
    It keeps the newest ``max_tokens`` tokens: a server's history stays bounded however long it
    runs, and so does the scan of a match.
    """

    def __init__(self, depth: int = 32, max_tokens: int = MAX_HISTORY) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        self.index = SuffixIndex(depth)
        self.max_tokens = max_tokens
        self.version = 0

    def add(self, tokens: Sequence[int]) -> None:
        """Index one finished sequence (nothing spans from an earlier one into it), forgetting
        the oldest sequences beyond ``max_tokens`` tokens in all."""
        self.index.start_document()
        self.index.extend(tokens)
        self.index.forget_oldest(self.max_tokens)
        self.version += 1


@dataclass
class SuffixDrafter(OneHotProposals):
    """Proposes the most frequent continuation of the context's longest recurring suffix.

    Parameters
    ----------
    vocab_size
        The target's vocabulary size (the drafter has no model of its own).
    max_match, min_match
        The longest and the shortest suffix matched. A match of one token is a weak signal
        (its first token was right 10-20% of the time on the Qwen coder outputs here, against
        60-100% for matches of 2 to 6 tokens).
    max_tokens
        The most tokens proposed in one step (also never more than the step's k).
    min_probability
        Stop before a token where the empirical probability of the whole draft so far (the
        product of the continuation frequencies) would fall below this.
    history
        Earlier requests' sequences, shared across drafters (or None). The longer of the two
        matches, the request's own and the history's, is continued (the request's own on a tie:
        it is the better predictor of itself).

    The index follows the context: when a call's context extends the indexed one, only the new
    tokens are added; otherwise (an unrelated request, or another branch of an enumeration) it is
    built again from the context. Proposals are therefore a function of the context alone, and
    ``propose(c, j)`` is the first j tokens of ``propose(c, k)`` for j <= k. Draws no randomness.
    A drafter kept across requests (a server's: a follow-up turn's prompt extends the last
    request's context, so only its new tokens are indexed) is told where each request begins
    (:meth:`begin_request`).
    """

    vocab_size: int
    max_match: int = 16
    max_tokens: int = 16
    min_probability: float = 0.1
    min_match: int = 1
    history: SuffixHistory | None = None
    _index: SuffixIndex = field(init=False, repr=False)
    _history_version: int = field(init=False, repr=False, default=0)

    def __post_init__(self) -> None:
        if self.vocab_size < 1:
            raise ValueError(f"vocab_size must be >= 1, got {self.vocab_size}")
        if not 1 <= self.min_match <= self.max_match or self.max_tokens < 1:
            raise ValueError(
                f"need 1 <= min_match <= max_match and max_tokens >= 1, got {self.min_match}, "
                f"{self.max_match} and {self.max_tokens}"
            )
        if not 0 <= self.min_probability <= 1:
            raise ValueError(f"min_probability must lie in [0, 1], got {self.min_probability}")
        self._index = SuffixIndex(self.max_match + self.max_tokens)

    def begin_request(self) -> None:
        """A new request begins: it reads the history as it stands now (the request's own
        index is kept, for a prompt that extends it)."""
        self._history_version = self.history.version if self.history else 0

    def propose_tokens(self, prefix: Sequence[int], k: int) -> list[int]:
        """The proposed tokens alone, without q (a
        :class:`~spec_decode.drafting.drafters.DeterministicDrafter`)."""
        indexed = len(self._index.tokens)
        if len(prefix) < indexed or list(prefix[:indexed]) != self._index.tokens:
            self._index, indexed = SuffixIndex(self._index.depth), 0
        if indexed == 0:  # a new request (or branch): it reads the history as it stands now
            self.begin_request()
        elif self.history is not None and self.history.version != self._history_version:
            raise ValueError("the shared suffix history changed in the middle of a request")
        self._index.extend(prefix[indexed:])
        length, node = self._index.longest_match(prefix, self.max_match, self.min_match)
        if self.history is not None:
            longer = max(length + 1, self.min_match)
            _, shared = self.history.index.longest_match(prefix, self.max_match, longer)
            node = shared or node
        return continuation(node, min(k, self.max_tokens), self.min_probability)
