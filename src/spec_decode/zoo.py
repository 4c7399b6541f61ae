"""Broken verification rules and drafters, re-creating exactness bugs that shipped in real engines.

Each entry documents its mechanism. The certificates must FAIL every one of them: this is how the
test suite shows that its certificates can fail at all.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spec_decode.randomness import RandomSource


def resample_from_target(
    p: np.ndarray, q: np.ndarray, draft_tokens: Sequence[int], rng: RandomSource
) -> list[int]:
    """On rejection, sample from p instead of the residual normalize(max(p - q, 0)).

    Mechanism: the rejected token can be drawn again and tokens the draft over-proposes are
    over-represented; the first token's distribution becomes min(p, q) + (1 - sum min(p, q)) p.
    """
    emitted: list[int] = []
    for position, token in enumerate(draft_tokens):
        if not rng.bernoulli(p[position, token] / q[position, token]):
            emitted.append(rng.categorical(p[position]))
            return emitted
        emitted.append(int(token))
    emitted.append(rng.categorical(p[len(draft_tokens)]))
    return emitted
