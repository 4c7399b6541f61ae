"""The interfaces the generation loop calls: drafters (chains and trees), k policies, planners.

They live in core because its step functions (:mod:`spec_decode.core.steps`) call them; the
implementations live one layer up, in :mod:`spec_decode.drafting`. Exactness asks one thing of a
drafter: each token really was drawn from the q row reported for it. It asks one thing of a
policy or a planner: the choice is made from the past (context and trace), never from the step's
own random draws.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

import numpy as np

from spec_decode.core.randomness import RandomSource
from spec_decode.core.trace import Trace
from spec_decode.core.tree import TokenTree, TreeShape


class Drafter(Protocol):
    """Proposes up to k tokens after ``prefix`` with the rows they were drawn from.

    ``propose(prefix, k, rng) -> (tokens, q)``, ``q`` of shape (len(tokens), V). Fewer than ``k``
    tokens (none at all: one plain target step) are allowed; a deterministic drafter reports
    one-hot rows.
    """

    vocab_size: int

    def propose(
        self, prefix: Sequence[int], k: int, rng: RandomSource
    ) -> tuple[list[int], np.ndarray]: ...


class DeterministicDrafter(Drafter, Protocol):
    """A drafter whose proposal is a function of the prefix alone (no randomness, one-hot q),
    with ``propose_tokens(prefix, k)``: the tokens ``propose`` would give, without building q
    (k rows of the vocabulary's size: the auto policy peeks at every such drafter each step)."""

    def propose_tokens(self, prefix: Sequence[int], k: int) -> list[int]: ...


class TreeDrafter(Protocol):
    """Proposes a token tree; each node's q row is the one its token was drawn from, given
    everything drawn before it (its path and its earlier siblings)."""

    vocab_size: int

    def propose_tree(self, prefix: Sequence[int], shape: TreeShape, rng: RandomSource) -> TokenTree:
        """A tree no deeper than ``shape.depth`` below ``prefix``."""
        ...


class KPolicy(Protocol):
    """Chooses the number of tokens to draft next (0: a plain target pass) from the trace."""

    def next_k(self, trace: Trace) -> int: ...


class Plan(NamedTuple):
    """A planner's choice: ask drafter ``drafter`` for ``k`` tokens (k = 0: a plain target pass).

    ``proposals`` are the deterministic proposals the planner looked at, recorded in the step.
    """

    drafter: str
    k: int
    proposals: Mapping[str, Sequence[int]] = {}


class Planner(Protocol):
    """Chooses, before each chain step, which drafter to ask and for how many tokens.

    ``plan(context, trace, k_max)`` returns a :class:`Plan` with 0 <= k <= ``k_max``.
    """

    def plan(self, context: list[int], trace: Trace, k_max: int) -> Plan: ...
