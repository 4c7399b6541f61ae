"""Broken tree verification and tree drafting (multi-draft speculation).

Tree rules take (p, tree, rng) and tree drafters propose a TokenTree, so these are audited with
``audit(tree_rule=...)``-style certificates in tests/certify, not in the chain registries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from spec_decode.core.models import Model
from spec_decode.core.randomness import RandomSource
from spec_decode.core.rules import residual
from spec_decode.core.sampling import SamplingParams
from spec_decode.core.tree import ROOT, TokenTree, TreeShape
from spec_decode.drafting.tree_drafters import ModelTreeDrafter


def tree_without_residual_update(p: np.ndarray, tree: TokenTree, rng: RandomSource) -> list[int]:
    """Tree verification that tries every sibling against the node's own target row p, never
    taking a rejected sibling's q out of it; when all are rejected it samples the residual of p
    and the last sibling's q.

    Each sibling then gets a fresh chance at the mass p shares with q: a token both models like is
    accepted by the first sibling that carries it, then again by a later one after a rejection, so
    it comes out too often and the residual, taken once, cannot pay it back. With one child per
    node this is the exact chain rule: the bug only shows on trees with a width of 2 or more.
    """
    emitted: list[int] = []
    node = ROOT
    while True:
        target, children = p[node + 1], tree.children(node)
        for child in children:
            token = tree.tokens[child]
            if rng.bernoulli(target[token] / tree.q[child, token]):
                emitted.append(token)
                node = child
                break
        else:
            fallback = residual(target, tree.q[children[-1]]) if children else target
            emitted.append(rng.categorical(fallback))
            return emitted


@dataclass(frozen=True)
class UnadjustedTreeDrafter:
    """Draws siblings without replacement but reports every sibling as drawn from the unadjusted
    draft row q.

    The i-th sibling really comes from q with the earlier siblings removed and renormalised,
    q_i = q / (1 - q(x_1) - ...) off {x_1, ...}, which is larger than q on every remaining token.
    Verifying it against q accepts it with min(1, r(x)/q(x)) and takes q, not q_i, out of the
    residual: later siblings are accepted too often and the fallback no longer pays it back.
    """

    model: Model
    sampling: SamplingParams = field(default_factory=SamplingParams)

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    def propose_tree(self, prefix: Sequence[int], shape: TreeShape, rng: RandomSource) -> TokenTree:
        drafter = ModelTreeDrafter(self.model, self.sampling, replacement=False)
        tree = drafter.propose_tree(prefix, shape, rng)
        first_sibling = [tree.children(parent).start for parent in tree.parents]
        return TokenTree(tree.tokens, tree.parents, tree.q[first_sibling])
