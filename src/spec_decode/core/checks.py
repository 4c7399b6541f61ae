"""Validation at the boundary: everything that enters or leaves the sampler (prompts, drafter
proposals, target scores, rule outputs) is checked here and rejected with a ``ValueError`` that
names the problem."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence

import numpy as np

from spec_decode.core.distributions import check_distributions
from spec_decode.core.rules import Verdict
from spec_decode.core.tree import TokenTree

#: The most tokens one generation may emit: longer than any model's context window, and a toy
#: run of this length already takes minutes. It is checked before the first step, so a typo
#: (``n_tokens=10**12``) fails at once with the limit named instead of running for days.
MAX_TOKENS = 1_000_000


def whole_number(value: object, name: str) -> int:
    """``value`` as an int when it is a whole number (an int, a numpy integer or an integral
    float), else a ValueError naming ``name``: 3.5 tokens or a token id 0.5 is a mistake to
    report, not a number to truncate."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a whole number, got {value!r} ({type(value).__name__})")
    if isinstance(value, numbers.Integral):
        return int(value)
    if not float(value).is_integer():
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    return int(value)


def check_count(value: object, name: str, minimum: int = 0, maximum: int | None = None) -> int:
    """A whole number in [minimum, maximum] (a ValueError naming ``name`` and the limit)."""
    count = whole_number(value, name)
    if count < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {count}")
    if maximum is not None and count > maximum:
        raise ValueError(f"{name} = {count:,} is above the limit of {maximum:,}")
    return count


def check_n_tokens(n_tokens: object) -> int:
    """How many tokens to generate: a whole number in [0, :data:`MAX_TOKENS`]."""
    return check_count(n_tokens, "n_tokens", 0, MAX_TOKENS)


def check_prefix(prefix: Sequence[int], vocab_size: int) -> list[int]:
    """The prompt as a list of ints, each a whole number inside the vocabulary (at least one)."""
    tokens = [whole_number(t, "prefix tokens") for t in prefix]
    if not tokens:
        raise ValueError("the prefix (prompt) is empty: give at least one token")
    if min(tokens) < 0 or max(tokens) >= vocab_size:
        raise ValueError(f"prefix tokens must lie in [0, {vocab_size}), got {tokens}")
    return tokens


def check_proposal(
    tokens: Sequence[int], q: np.ndarray, k: int, vocab_size: int
) -> tuple[list[int], np.ndarray]:
    """A drafter's (tokens, q): at most k tokens in the vocabulary, q one valid row per token,
    giving each drafted token a positive probability."""
    tokens = check_drafted(tokens, k, vocab_size)
    q = check_distributions(np.reshape(q, (len(tokens), vocab_size)), vocab_size, "draft q")
    claimed = q[np.arange(len(tokens)), tokens]
    if np.any(claimed <= 0):
        raise ValueError("drafter proposed a token its own q gives probability 0")
    return tokens, q


def check_drafted(tokens: Sequence[int], k: int, vocab_size: int) -> list[int]:
    """Drafted tokens as a list of ints: at most k of them, each in the vocabulary."""
    tokens = [int(t) for t in tokens]
    if len(tokens) > k:
        raise ValueError(f"drafter proposed {len(tokens)} tokens, more than k = {k}")
    if any(not 0 <= t < vocab_size for t in tokens):
        raise ValueError(f"drafter proposed tokens outside the vocabulary: {tokens}")
    return tokens


def check_tree(tree: object, max_depth: int, vocab_size: int) -> TokenTree:
    """A tree drafter's proposal: a TokenTree over this vocabulary, no deeper than asked."""
    if not isinstance(tree, TokenTree):
        raise ValueError(f"tree drafter must return a TokenTree, got {type(tree).__name__}")
    if tree.vocab_size != vocab_size:
        raise ValueError(f"drafted tree's q has vocabulary {tree.vocab_size}, not {vocab_size}")
    if tree.depth > max_depth:
        raise ValueError(f"drafter proposed a tree of depth {tree.depth}, deeper than {max_depth}")
    return tree


def check_scores(raw_p: np.ndarray, n_drafted: int, vocab_size: int) -> np.ndarray:
    """The target's score rows: valid distributions, one per drafted token plus one."""
    raw_p = check_distributions(raw_p, vocab_size, "target distribution")
    if raw_p.shape != (n_drafted + 1, vocab_size):
        raise ValueError(
            f"target score has shape {raw_p.shape}, expected {(n_drafted + 1, vocab_size)}"
        )
    return raw_p


def check_verdict(
    result: object, n_drafted: int, vocab_size: int, kept: Callable[[list[int]], int]
) -> Verdict:
    """A rule's output as a :class:`~spec_decode.core.rules.Verdict`: between 1 and
    n_drafted + 1 token ids in the vocabulary, of which at most the drafted many are accepted.

    A rule that returns the tokens alone is credited with ``kept(tokens)`` accepted drafts (the
    emitted prefix that follows the drafts).
    """
    verdict = result if isinstance(result, Verdict) else None
    emitted = verdict.emitted if verdict is not None else result
    if not isinstance(emitted, Sequence) or isinstance(emitted, str):
        raise ValueError(f"rule must return a list of token ids, got {type(emitted).__name__}")
    if not 1 <= len(emitted) <= n_drafted + 1:
        raise ValueError(
            f"rule emitted {len(emitted)} tokens; a step must emit between 1 and "
            f"k + 1 = {n_drafted + 1}"
        )
    if any(not isinstance(t, int | np.integer) or not 0 <= t < vocab_size for t in emitted):
        raise ValueError(f"rule emitted tokens outside the vocabulary [0, {vocab_size}): {emitted}")
    tokens = [int(t) for t in emitted]
    accepted = verdict.accepted if verdict is not None else kept(tokens)
    if not 0 <= accepted <= min(len(tokens), n_drafted):
        raise ValueError(
            f"rule accepted {accepted} drafts of {n_drafted} while emitting {len(tokens)} tokens"
        )
    return Verdict(tokens, accepted)


def leading_matches(drafted: Sequence[int], emitted: Sequence[int]) -> int:
    """The length of the common prefix of ``drafted`` and ``emitted``."""
    for i, (d, e) in enumerate(zip(drafted, emitted, strict=False)):
        if d != e:
            return i
    return min(len(drafted), len(emitted))
