"""Exact verification of a token tree: recursive rejection sampling (SpecInfer, SpecTr-style).

A tree rule maps ``(p, tree, rng)`` to a :class:`~spec_decode.core.rules.Verdict` (or, for code
under audit, the emitted tokens alone). ``p`` has shape (tree.size + 1, V): the
warped target distribution after the prefix (row 0) and after each node's path (row i + 1).

Why :func:`verify_tree` is exact. At a node with target distribution p, its children x_1..x_n are
tried in the order they were drawn, with r_0 = p and q_i the row node x_i was drawn from. Child i
is accepted with probability min(1, r_(i-1)(x_i) / q_i(x_i)); on rejection
r_i = residual(r_(i-1), q_i) = normalize(max(r_(i-1) - q_i, 0)); if all are rejected the step
emits a sample of r_n and stops. Given everything drawn and decided before child i, x_i ~ q_i, so
trying child i and falling back to "whatever the later children produce" is one standard
speculative step from target r_(i-1) and draft q_i: if the fallback emits r_i exactly, the step
emits r_(i-1) exactly (the single-draft identity of :mod:`spec_decode.certify.closed_form`). By
induction from the last child (whose fallback is a plain sample of r_n), the node emits p exactly.
An accepted child's subtree was drawn given that child only, so descending repeats the argument one
token further; a leaf has no children, and its "fallback" is the bonus token sampled from p.

This needs q_i to be the distribution x_i was *really* drawn from: q itself for i.i.d. siblings,
q with the earlier siblings removed and renormalised for siblings drawn without replacement (see
:mod:`spec_decode.drafting.tree_drafters`). A rejected x_i gets r_i(x_i) = 0 (rejection is possible
only where r_(i-1)(x_i) < q_i(x_i)), so a duplicate sibling of a rejected token is rejected surely
and the final residual never re-emits a rejected candidate.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from spec_decode.core.randomness import RandomSource
from spec_decode.core.rules import Verdict, residual
from spec_decode.core.tree import ROOT, TokenTree


class TreeRule(Protocol):
    """The tree verification-rule interface."""

    def __call__(
        self, p: np.ndarray, tree: TokenTree, rng: RandomSource
    ) -> Verdict | list[int]: ...


def verify_tree(p: np.ndarray, tree: TokenTree, rng: RandomSource) -> Verdict:
    """Walk down ``tree`` by recursive rejection sampling; emit 1 to depth + 1 tokens.

    At each node try its children in drawing order, accepting child x with probability
    min(1, r(x) / q_x(x)) where r is the node's target row with every earlier rejected sibling's
    q taken out (:func:`~spec_decode.core.rules.residual`); descend into an accepted child; when all
    children are rejected, or at a leaf, emit a sample of r and stop.
    """
    emitted: list[int] = []
    node = ROOT
    while True:
        target = p[node + 1]
        for child in tree.children(node):
            token = tree.tokens[child]
            if rng.bernoulli(target[token] / tree.q[child, token]):
                emitted.append(token)
                node = child
                break
            target = residual(target, tree.q[child])
        else:
            return Verdict([*emitted, rng.categorical(target)], accepted=len(emitted))
