"""What the other requests of a shared call add to it, as one request's planner sees it.

With several requests on one server, their blocks are scored together, in one call per step
(:mod:`spec_decode.backends.llamacpp.slots`): the call costs the curve's price of all its rows,
and every request in it waits that long for its own. A long bet therefore slows the neighbours
too, so the auto planner prices a block on the whole call
(:class:`~spec_decode.drafting.auto.AutoPlanner`), counting every request's rate alike: a block
is worth its rows when it raises the product of the call's requests' token rates (proportional
fairness). For its own option's expected tokens E and rows n, beside m neighbours adding R rows,
that is E / cost(n + R) ** (m + 1), the neighbours' own tokens being fixed. Alone (m = R = 0) it
is the solo objective E / cost(n). So a request bets long beside neighbours that bet long too
(each one's gain outweighs the longer call), and not beside plain decoders, whose every token
its block would delay.

A call holds at most the exact block size, so while a neighbour reads its prompt every drafted
row takes the place of one of its prompt tokens: a request then drafts nothing, and speculation
never delays a neighbour's first token.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Neighbours:
    """How many other requests share each call, the rows they add to it (their recent means,
    summed), and whether one of them is still reading its prompt."""

    count: int = 0
    rows: int = 0
    reading_prompt: bool = False


#: A request with no neighbours: the planner's solo objective.
ALONE = Neighbours()
