"""The coupled rule: speculative output equal, token for token and for every seed, to
target-only decoding under positional noise (Daliri, Musco, Suresh, arXiv 2408.07978).

Target-only decoding with a :class:`~spec_decode.core.noise.PositionalSource` emits
y_t = S(p_t, xi_t) at output position t. A coupled step computes the same y_t at every drafted
position: it accepts the draft while y_t equals it, emits y_t at the first mismatch and stops,
and after a full acceptance emits the bonus y from the next position's noise. Every emitted token
is then target-only decoding's token for that seed, whatever was drafted: the drafts decide only
how many positions one target pass settles, never which tokens come out. Exactness in
distribution follows from that of target-only positional sampling, and it asks nothing of the
drafter (its q is not read).

What drafting gains depends on how the drafts are made. A one-hot draft x (lookup, suffix) is
accepted with probability P(S(p, xi) = x) = p(x), as under the standard rule. A draft model
drawing with the same noise (x_t = S(q_t, xi_t),
:class:`~spec_decode.drafting.drafters.ModelDrafter` with ``coupled=True``) is accepted when both
races pick the same token: P(x = y = i) = 1 / sum_j max(p_j / p_i, q_j / q_i) for the race, at
least (1 - TV) / (1 + TV) in all, against 1 - TV for the standard rule
(:mod:`spec_decode.theory.coupled`). In a tree, siblings are the top m of the draft's race at
their depth, and the child equal to y is accepted.

Position bookkeeping is the whole of the rule's correctness: the token at step offset i uses
``noise(i)``, the bonus ``noise(k)``, and the loop starts the next step at the position after the
last emitted token (:func:`~spec_decode.core.generate.generate`). The zoo keeps the three ways to
get it wrong (:mod:`spec_decode.certify.zoo.coupled`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from spec_decode.core.noise import require_positional
from spec_decode.core.randomness import RandomSource
from spec_decode.core.rules import Verdict
from spec_decode.core.tree import ROOT, TokenTree


def is_coupled(rule: object) -> bool:
    """Whether ``rule`` samples with positional noise (and so needs a positional source and
    drafters that draw with the same noise)."""
    return bool(getattr(rule, "positional", False))


@dataclass(frozen=True)
class CoupledRule:
    """The coupled chain rule, ``(p, q, draft_tokens, rng) -> Verdict`` (``q`` unused)."""

    positional: ClassVar[bool] = True

    def __call__(
        self, p: np.ndarray, q: np.ndarray, draft_tokens: Sequence[int], rng: RandomSource
    ) -> Verdict:
        source = require_positional(rng)
        emitted: list[int] = []
        for offset, token in enumerate(draft_tokens):
            target_token = source.noise(offset).choose(p[offset])
            if target_token != token:
                return Verdict([*emitted, target_token], accepted=offset)
            emitted.append(int(token))
        bonus = source.noise(self.bonus_offset(len(draft_tokens))).choose(p[len(draft_tokens)])
        return Verdict([*emitted, bonus], accepted=len(emitted))

    def bonus_offset(self, drafted: int) -> int:
        """The step offset whose noise draws the bonus after ``drafted`` accepted drafts: the
        next position's (the zoo keeps a rule that gets this wrong)."""
        return drafted


@dataclass(frozen=True)
class CoupledTreeRule:
    """The coupled tree rule, ``(p, tree, rng) -> Verdict``: at depth d compute the target's
    token with ``noise(d)``, descend into the child holding it, stop and emit it when no child
    does (or below a leaf)."""

    positional: ClassVar[bool] = True

    def __call__(self, p: np.ndarray, tree: TokenTree, rng: RandomSource) -> Verdict:
        source = require_positional(rng)
        emitted: list[int] = []
        node = ROOT
        while True:
            target_token = source.noise(len(emitted)).choose(p[node + 1])
            child = next((c for c in tree.children(node) if tree.tokens[c] == target_token), None)
            if child is None:
                return Verdict([*emitted, target_token], accepted=len(emitted))
            emitted.append(target_token)
            node = child


#: The coupled rules, ready to pass as ``rule=``.
coupled_rule = CoupledRule()
coupled_tree_rule = CoupledTreeRule()
