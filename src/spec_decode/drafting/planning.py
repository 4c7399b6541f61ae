"""Plans: which drafter a chain step asks, and for how many tokens (0: a plain target pass).

:func:`~spec_decode.core.generate.planned_step` consults a :class:`Planner` before every pass;
:class:`PolicyPlanner` is the single-drafter case driven by a
:class:`~spec_decode.drafting.policies.KPolicy`, and :mod:`spec_decode.drafting.auto` the planner
that chooses among drafters by expected tokens per second.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from spec_decode.core.trace import Trace
from spec_decode.drafting.policies import KPolicy


class Plan(NamedTuple):
    """A planner's choice: ask drafter ``drafter`` for ``k`` tokens (k = 0: a plain target pass).

    ``proposals`` are the deterministic proposals the planner looked at, recorded in the step.
    """

    drafter: str
    k: int
    proposals: Mapping[str, Sequence[int]] = {}


class Planner(Protocol):
    """Chooses, before each chain step, which drafter to ask and for how many tokens.

    ``plan(context, trace, k_max)`` returns a :class:`Plan` with 0 <= k <= ``k_max``. Exactness
    holds for any choice made from the past (context and trace), never from the random draws of
    the step itself; see :func:`~spec_decode.core.generate.planned_step`.
    """

    def plan(self, context: list[int], trace: Trace, k_max: int) -> Plan: ...


@dataclass(frozen=True)
class PolicyPlanner:
    """One drafter, k from a :class:`~spec_decode.drafting.policies.KPolicy`."""

    policy: KPolicy

    def plan(self, context: list[int], trace: Trace, k_max: int) -> Plan:
        k = self.policy.next_k(trace)
        if k < 0:
            raise ValueError(f"the k policy chose k = {k}; it must be >= 0")
        return Plan(ONLY, min(k, k_max))


#: The name :func:`~spec_decode.core.generate.chain_step` gives its single drafter.
ONLY = "drafter"
