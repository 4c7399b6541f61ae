"""What the other requests of a shared call add to it, as one request's planner sees it.

With several requests on one server, their blocks are scored together, in one call per step
(:mod:`spec_decode.backends.llamacpp.slots`), and every request in it waits for the whole call.
A long bet therefore slows the neighbours too, so the auto planner prices a block on the whole
call (:class:`~spec_decode.drafting.auto.AutoPlanner`), counting every request's rate alike: a
block is worth its rows when it raises the product of the call's requests' token rates
(proportional fairness). For its own option's expected tokens E, beside m neighbours, that is
E / seconds(call) ** (m + 1), the neighbours' own tokens being fixed; alone it is the solo
objective E / cost(n).

What a call costs follows llama.cpp, which splits a call on a cache with cells per sequence into
micro-batches taking as many rows from every sequence with rows left as the fewest has, each a
pass of its own over the weights (:func:`call_seconds`). One token from each of four sequences
is one pass; a block of 16 beside three single tokens is two, the second as dear as the block
alone. So a request bets long beside neighbours that bet as long, and not beside plain decoders,
whose every token its block would delay.

A call holds at most the exact block size, so while a neighbour reads its prompt every drafted
row takes the place of one of its prompt tokens: a request then drafts nothing, and speculation
never delays a neighbour's first token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spec_decode.drafting.costs import CostCurve


@dataclass(frozen=True)
class Neighbours:
    """The rows each other request adds to a call (its recent mean), and whether one of them is
    still reading its prompt."""

    rows: tuple[int, ...] = ()
    reading_prompt: bool = False

    @property
    def count(self) -> int:
        return len(self.rows)


#: A request with no neighbours: the planner's solo objective.
ALONE = Neighbours()


def call_seconds(costs: CostCurve, rows: Sequence[int]) -> float:
    """Seconds of one call scoring ``rows[i]`` rows of sequence i, split as llama.cpp splits
    it: while rows are left, a pass takes as many from every sequence with rows left as the
    fewest has."""
    seconds, taken = 0.0, 0
    counts = sorted(r for r in rows if r > 0)
    for i, count in enumerate(counts):
        if count > taken:
            seconds += costs.target((len(counts) - i) * (count - taken))
            taken = count
    return seconds
