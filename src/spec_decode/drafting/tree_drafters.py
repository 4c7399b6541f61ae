"""Tree drafters: propose a token tree and report the distribution each node was drawn from.

A tree drafter has a ``vocab_size`` and ``propose_tree(prefix, shape, rng) -> TokenTree``. As for
chain drafters, exactness needs one thing only: each node's token really was drawn from the q row
the tree reports for it, *given everything drawn before it* (its path and its earlier siblings).

Siblings may be drawn with replacement (i.i.d. from the draft row q: duplicates possible, each
duplicate wasted) or without replacement (no duplicates). Without replacement the i-th sibling is
drawn from q with the i - 1 earlier siblings' tokens removed and the rest renormalised,
q_i = q 1[x not in {x_1, ..., x_(i-1)}] / (1 - q(x_1) - ... - q(x_(i-1))), and that q_i, not q,
is what the tree reports for it: verifying it against the unadjusted q is biased
(:mod:`spec_decode.certify.zoo` keeps that bug). Once q's support is used up a node gets fewer
children.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from spec_decode.core.distributions import check_distributions
from spec_decode.core.models import Model
from spec_decode.core.noise import require_positional
from spec_decode.core.randomness import RandomSource
from spec_decode.core.sampling import SamplingParams
from spec_decode.core.tree import ROOT, TokenTree, TreeShape


def draw_siblings(
    q: np.ndarray, width: int, replacement: bool, rng: RandomSource
) -> list[tuple[int, np.ndarray]]:
    """Draw up to ``width`` sibling tokens from ``q``; return each with the row it was drawn from.

    With replacement every row is ``q``. Without, each row is ``q`` with the earlier siblings'
    tokens removed and renormalised; drawing stops early when no mass is left.
    """
    siblings: list[tuple[int, np.ndarray]] = []
    row = q
    for _ in range(width):
        token = rng.categorical(row)
        siblings.append((token, row))
        if not replacement:
            row = row.copy()
            row[token] = 0.0
            mass = row.sum()
            if not mass > 0:
                break
            row = row / mass
    return siblings


@dataclass(frozen=True)
class ModelTreeDrafter:
    """Drafts a tree of the requested shape from a draft model under the sampling controls.

    Each node with children costs one draft-model evaluation (``next_dist`` of its path), shared by
    all its children; a batched backend could evaluate a whole depth in one call instead.

    ``coupled`` makes a node's children at depth d the top ``width`` tokens of the draft row under
    the noise of step offset d (distinct, for the coupled tree rule of
    :mod:`spec_decode.core.coupled`, which reads no q); each reports the draft row itself.
    """

    model: Model
    sampling: SamplingParams = field(default_factory=SamplingParams)
    replacement: bool = True
    coupled: bool = False

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    def propose_tree(self, prefix: Sequence[int], shape: TreeShape, rng: RandomSource) -> TokenTree:
        tokens: list[int] = []
        parents: list[int] = []
        rows: list[np.ndarray] = []
        frontier = [(ROOT, list(prefix))]
        for depth, width in enumerate(shape.widths):
            next_frontier = []
            for parent, context in frontier:
                raw = check_distributions(
                    self.model.next_dist(context), self.vocab_size, "draft distribution"
                )
                for token, row in self._siblings(self.sampling.warp(raw), width, depth, rng):
                    next_frontier.append((len(tokens), [*context, token]))
                    tokens.append(token)
                    parents.append(parent)
                    rows.append(row)
            frontier = next_frontier
        return TokenTree(tuple(tokens), tuple(parents), np.reshape(rows, (-1, self.vocab_size)))

    def _siblings(
        self, q: np.ndarray, width: int, depth: int, rng: RandomSource
    ) -> list[tuple[int, np.ndarray]]:
        if self.coupled:
            return [(t, q) for t in require_positional(rng).noise(depth).ranked(q, width)]
        return draw_siblings(q, width, self.replacement, rng)
