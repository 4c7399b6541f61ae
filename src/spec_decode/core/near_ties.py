"""Settling near-ties of the coupled rule's choices: per-seed identity with a target whose block
rows are close to, but not bitwise, the rows target-only decoding computes.

Under the coupled rule a speculative step computes y = S(warp(p), xi) on rows the target scored
in a block, while target-only decoding computes it on rows scored one token at a time; the two
emit the same tokens for a seed only where both rows give the same choice. A target may state
how far block scoring can move the difference of any two logits of a row (``block_tolerance``)
and offer the row target-only decoding computes (``exact_dist(context)``). A row whose choice
cannot be shown stable under that tolerance (:func:`~spec_decode.core.samplers.choice_stable`)
could choose differently, so it is replaced by the exact row before the rule reads it; elsewhere the
tolerance cannot change the choice. Per-seed identity then holds by construction, at any
temperature and with any warp, for chains and trees.

Greedy rows need nothing here: a one-hot choice flips only where the
top two logits are within the tolerance, which the backend that states the tolerance re-scores
itself. The standard rule never comes here: it is exact in distribution whatever the rows'
rounding, and per-seed identity is not its promise.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spec_decode.core.distributions import check_distributions
from spec_decode.core.noise import is_positional
from spec_decode.core.samplers import choice_stable
from spec_decode.core.sampling import SamplingParams


def settling_tolerance(target: object) -> float | None:
    """The tolerance to settle ``target``'s rows against: its ``block_tolerance`` when it states
    one and offers ``exact_dist``, else None (nothing to settle)."""
    tolerance = getattr(target, "block_tolerance", None)
    if tolerance is None or getattr(target, "exact_dist", None) is None:
        return None
    return float(tolerance)


def settle_rows(
    target: object,
    sampling: SamplingParams,
    rows: np.ndarray,
    source: object,
    context: Sequence[int],
    paths: Sequence[Sequence[int]],
) -> np.ndarray:
    """``rows`` with every row whose choice is not shown stable under the target's tolerance
    replaced by ``target.exact_dist(context + paths[i])``.

    Row i follows ``context + paths[i]`` and is chosen with the noise of step offset
    ``len(paths[i])`` (a chain's row i follows i drafts, a tree node's row its path). Returned
    unchanged (the same array) when the target offers nothing to settle with or ``source`` is
    not positional.
    """
    tolerance = settling_tolerance(target)
    if tolerance is None or not is_positional(source) or sampling.greedy:
        return rows
    settled = rows
    for i, path in enumerate(paths):
        if choice_stable(sampling, rows[i], source.noise(len(path)), tolerance):
            continue
        if settled is rows:
            settled = rows.copy()
        exact = target.exact_dist([*context, *path])  # type: ignore[attr-defined]
        settled[i] = check_distributions(exact, rows.shape[1], "exact target distribution")
    return settled
