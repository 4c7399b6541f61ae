"""The KV-cache contract both backends keep, checked by the same code on each.

A verification pass leaves the cache holding exactly the committed context plus the drafts; the
next pass, whatever was accepted (all drafts and the bonus, some and a residual, none), cuts the
cache back to the common prefix and feeds only what is new; a draft model proposing token by token
is brought level in one call. ``reference(context, tokens)`` gives the rows the same model scores
from an empty cache, which the warm rows must match (``assert_close``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Rows = Callable[[list[int], list[int]], np.ndarray]
Compare = Callable[[np.ndarray, np.ndarray], None]


def fed(model, call: Callable[[], np.ndarray]) -> tuple[int, np.ndarray]:
    """Tokens ``call()`` fed through the model, and its result; checks the cache's own length."""
    before = model.stats.tokens_fed
    result = call()
    assert model.cache_length == len(model.cached_tokens)
    return model.stats.tokens_fed - before, result


def check_target_cache(target, reference: Rows, assert_close: Compare) -> None:
    """Four verification passes of 4 drafts: the first, then after full acceptance + bonus 3,
    after 2 of 4 accepted + residual 3, after an immediate rejection (residual 2)."""
    prefix, drafts, k = [1, 2, 3, 4], [4, 0, 1, 2], 4
    target.reset()
    steps = [
        (prefix, len(prefix) + k),
        (prefix + drafts + [3], 1 + k),
        (prefix + drafts + [3] + drafts[:2] + [3], 1 + k),
        (prefix + drafts + [3] + drafts[:2] + [3, 2], 1 + k),
    ]
    for context, n_fed in steps:
        n, rows = fed(target, lambda c=context: target.score(c, drafts))
        assert n == n_fed
        assert target.cached_tokens == context + drafts
        assert_close(rows, reference(context, drafts))
    assert target.cache_length == len(steps[-1][0]) + k


def check_draft_cache(
    draft, vocab: int, reference: Rows | None = None, assert_close: Compare | None = None
) -> None:
    """A draft proposing 3 tokens greedily, then brought level after full acceptance + bonus
    (2 tokens in one call), partial acceptance + residual, and an immediate rejection. Without
    ``reference`` the rows are not compared (an int8 draft's rows depend on how tokens were
    grouped into calls, through a shared activation scale; exactness needs only that each q is
    reported as drawn)."""
    prefix, k = [1, 2, 3], 3
    draft.reset()

    def propose(context: list[int]) -> list[int]:
        tokens: list[int] = []
        for _ in range(k):
            tokens.append(int(np.argmax(draft.next_dist(context + tokens))))
        return tokens

    drafts = propose(prefix)
    assert draft.cached_tokens == prefix + drafts[:-1]  # the last draft is never fed
    prefix = [*prefix, *drafts, 0]
    calls = draft.stats.calls
    assert draft.unread(prefix) == 2  # what the planner prices reading at
    assert fed(draft, lambda: draft.next_dist(prefix))[0] == 2
    assert draft.stats.calls == calls + 1
    drafts = propose(prefix)
    prefix = [*prefix, drafts[0], (drafts[1] + 1) % vocab]
    assert draft.unread(prefix) == 1
    n, _ = fed(draft, lambda: draft.next_dist(prefix))
    assert n == 1 and draft.cached_tokens == prefix
    drafts = propose(prefix)
    prefix = [*prefix, (drafts[0] + 1) % vocab]
    n, row = fed(draft, lambda: draft.next_dist(prefix))
    assert n == 1 and draft.cached_tokens == prefix
    if reference is not None and assert_close is not None:
        assert_close(row[None], reference(prefix, []))
