"""Suffix decoding: model-free drafts from the most frequent continuation of the context's suffix.

SuffixDecoding (Oliaro et al., arXiv 2411.04975) indexes earlier text in a suffix tree with an
occurrence count at every node. To draft, it matches the longest suffix of the current context
that occurred before, then follows the most frequent child again and again; the fraction of the
node's continued occurrences that went to that child is the empirical probability the text
continues that way, and drafting stops once the product of these probabilities (the empirical
chance the whole draft is right) falls below a threshold.

:class:`SuffixIndex` holds the same counts as that suffix tree, cut at ``depth`` tokens: it is the
trie of every substring of length <= ``depth`` (a suffix tree without path compression, which
changes no count). Appending a token costs O(depth): the nodes of the last ``depth`` suffixes are
kept (the "active" nodes) and each steps to its child for the new token, so nothing is ever
rebuilt while the context only grows, which it does during generation (rejected drafts never enter
it). A match walks down from the root once per candidate length, at most max_match^2 dictionary
steps, the same walk for the request's own index and for a shared history.

:class:`SuffixDrafter` indexes the prompt and the output so far and, optionally, reads a
:class:`SuffixHistory` shared across requests in one process: the finished sequences of earlier
requests (SuffixDecoding's global tree; agentic workloads repeat themselves across requests). Its
proposal is a deterministic function of the context and of the history as it stood when the
request began, so it reports one-hot q rows and the exact rule stays exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from spec_decode.drafting.drafters import OneHotProposals


class _Node:
    """A substring: how often it occurred, how often something followed it, and what did."""

    __slots__ = ("children", "continued", "count")

    def __init__(self) -> None:
        self.count = 0
        self.continued = 0
        self.children: dict[int, _Node] = {}


class SuffixIndex:
    """Occurrence counts of every substring of at most ``depth`` tokens of a growing sequence."""

    def __init__(self, depth: int) -> None:
        if depth < 2:
            raise ValueError(f"depth must be >= 2, got {depth}")
        self.depth = depth
        self.tokens: list[int] = []
        self._root = _Node()
        self._active = [self._root]  # _active[m]: the node of the last m tokens

    def extend(self, tokens: Sequence[int]) -> None:
        """Append ``tokens``, counting each new substring ending at each of them."""
        for token in tokens:
            token = int(token)
            active = [self._root]
            for node in self._active[: self.depth]:
                child = node.children.get(token)
                if child is None:
                    child = node.children[token] = _Node()
                child.count += 1
                node.continued += 1
                active.append(child)
            self._active = active
            self.tokens.append(token)

    def start_document(self) -> None:
        """Begin a new sequence: later tokens form substrings with each other only."""
        self.tokens = []
        self._active = [self._root]

    def longest_match(
        self, context: Sequence[int], max_match: int, min_match: int
    ) -> tuple[int, _Node | None]:
        """The longest suffix of ``context`` (``min_match`` to ``max_match`` tokens) that was
        followed by something here: its length and node, or (0, None)."""
        for m in range(min(max_match, len(context), self.depth - 1), min_match - 1, -1):
            node: _Node | None = self._root
            for token in context[len(context) - m :]:
                node = node.children.get(int(token))
                if node is None:
                    break
            if node is not None and node.continued:
                return m, node
        return 0, None


def continuation(node: _Node | None, max_tokens: int, min_probability: float) -> list[int]:
    """The most frequent continuation after ``node``: follows the most frequent child (lowest id
    on ties) while the product of the empirical continuation frequencies
    count(child) / continued(node) stays >= ``min_probability``, for at most ``max_tokens``
    tokens (and never deeper than the index)."""
    tokens: list[int] = []
    probability = 1.0
    while node is not None and node.continued and len(tokens) < max_tokens:
        token, child = min(node.children.items(), key=lambda item: (-item[1].count, item[0]))
        probability *= child.count / node.continued
        if probability < min_probability:
            break
        tokens.append(token)
        node = child
    return tokens


class SuffixHistory:
    """Finished token sequences of earlier requests, indexed once and shared by the suffix
    drafters of later requests in the same process.

    Add a request's sequence (prompt and output) with :meth:`add` after it finished, never while
    a drafter reading this history is in the middle of a request: a proposal must not depend on
    the request's own future. A drafter checks this (:attr:`version`) and raises if it happens.
    """

    def __init__(self, depth: int = 32) -> None:
        self.index = SuffixIndex(depth)
        self.version = 0

    def add(self, tokens: Sequence[int]) -> None:
        """Index one finished sequence (nothing spans from an earlier one into it)."""
        self.index.start_document()
        self.index.extend(tokens)
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
