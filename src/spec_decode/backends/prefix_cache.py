"""What every real-model backend shares: a KV cache keyed by the tokens it covers.

The model interface is stateless (every call passes the full prefix), but re-running a prefix on
every call would cost a whole prompt per token. A backend therefore keeps one KV cache plus the
list of tokens it covers; on each call it finds the longest common prefix with the requested
sequence, drops the rest of its cache (keeping at most up to the last committed token, whose
logits are needed again) and feeds the remainder. :class:`PrefixCachedModel` holds the part that
is the same for every backend; a backend writes ``_dists`` (and ``reset``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

from spec_decode.core.errors import BadPrompt, ContextTooLong


@dataclass
class ForwardStats:
    """What a backend spent: forward calls, tokens fed, and seconds in cache bookkeeping (common
    prefix, trimming, input building), in the forward pass itself, and in turning logits into
    probabilities.

    ``calls``, ``tokens_fed`` and ``forward_s`` count the passes that answer the caller; a
    backend that re-scores near-tied rows the way target-only decoding does (transformers)
    counts that extra work apart: ``rescored_rows`` rows, in ``rescore_calls`` forward calls
    feeding ``rescore_tokens_fed`` tokens, taking ``rescore_s`` seconds. ``settled_rows``
    counts the rows the coupled rule's step asked for exactly because their noisy choice was
    near a tie (:mod:`spec_decode.core.near_ties`); those not already known to be target-only's
    are re-scored, and counted in ``rescored_rows`` too.
    """

    calls: int = 0
    tokens_fed: int = 0
    bookkeeping_s: float = 0.0
    forward_s: float = 0.0
    softmax_s: float = 0.0
    rescored_rows: int = 0
    rescore_calls: int = 0
    rescore_tokens_fed: int = 0
    rescore_s: float = 0.0
    settled_rows: int = 0

    def reset(self) -> None:
        """Every count and time back to zero."""
        for counter in fields(self):
            setattr(self, counter.name, counter.default)


class PrefixCachedModel:
    """``next_dist``, block ``score`` and the context-window check, on top of a backend's
    ``_dists(sequence, n_rows)``: the probabilities after each of the last ``n_rows`` prefixes of
    ``sequence``, reusing the cached prefix (``_cached``: the tokens the cache covers)."""

    vocab_size: int
    context_window: int
    _cached: list[int]

    def _dists(self, sequence: list[int], n_rows: int) -> np.ndarray:
        raise NotImplementedError

    @property
    def cached_tokens(self) -> list[int]:
        """The tokens whose keys and values the cache holds (a copy)."""
        return list(self._cached)

    def unread(self, sequence: Sequence[int]) -> int:
        """How many tokens of ``sequence`` the cache does not hold: what reading it costs."""
        return len(sequence) - common_prefix(self._cached, list(sequence))

    def check_fits(self, n_prompt: int, n_new: int = 0) -> None:
        """:class:`~spec_decode.core.errors.BadPrompt` for an empty prompt, and
        :class:`~spec_decode.core.errors.ContextTooLong` unless a prompt of ``n_prompt`` tokens
        plus ``n_new`` fits (both are ``ValueError`` s)."""
        if n_prompt < 1:
            raise BadPrompt("the prompt is empty: a causal LM needs at least one token")
        if n_prompt + n_new > self.context_window:
            raise ContextTooLong(
                f"prompt ({n_prompt} tokens) plus {n_new} new tokens exceeds the model's context "
                f"window of {self.context_window} tokens"
            )

    def check_ids(self, ids: Sequence[int]) -> None:
        """:class:`~spec_decode.core.errors.BadPrompt` unless every id in ``ids`` lies in the
        vocabulary."""
        if min(ids) < 0 or max(ids) >= self.vocab_size:
            shown = list(ids) if len(ids) <= 16 else f"{len(ids)} ids"
            raise BadPrompt(f"token ids must lie in [0, {self.vocab_size}), got {shown}")

    def next_dist(self, prefix: Sequence[int]) -> np.ndarray:
        """The distribution (float64, shape (V,)) of the token after ``prefix``."""
        return self._dists(list(prefix), 1)[0]

    def score(self, prefix: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        """Rows i = 0..len(tokens): the distribution after ``prefix + tokens[:i]``, in one pass."""
        return self._dists(list(prefix) + list(tokens), len(tokens) + 1)


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists (C-speed in the usual case)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]: bisect on list equality
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo
