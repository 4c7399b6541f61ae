"""One step's blocks for every request of a shared call, chosen together.

With several requests on one server, their blocks are scored together, one call per step
(:mod:`spec_decode.backends.llamacpp.slots`), and every request in it waits for the whole call.
So each request's auto planner (:class:`~spec_decode.drafting.auto.AutoPlanner`) offers its
options for the next call, an :class:`Option` for each block length it could feed with the
tokens that block is expected to emit, and reads every other request's offer; it then solves
the whole call (:func:`joint_plan`) and feeds its own part of the solution. Every request solves
the same problem from the same offers, in the same order, so they agree on it.

The solution maximises the product of the requests' token rates (proportional fairness): the sum
over requests of log(expected tokens) minus, for each request waiting on it, log(seconds of the
call). Alone that is the solo objective, expected tokens per second. Choosing together is what
lets requests that could all copy long do so: one long block beside three plain decoders would
slow each of them more than it gains, but four long blocks cost little more than one, and a
planner that only weighed its own move against its neighbours' last moves would never leave
plain decoding.

What a call costs follows llama.cpp, which splits a call on a cache with cells per sequence into
micro-batches, each a pass of its own over the weights (:func:`split_passes`): a micro-batch takes
the sequences with rows left from the lowest id on while their ids are consecutive, and as many
rows from each as the fewest of them has. One token from each of four sequences is one pass; a
block of 16 beside three single tokens is two, the second as dear as the block alone; single
tokens of sequences 0, 2 and 3 are two passes, since sequence 1 has none. On one unified cache
(the exact-rows build's slots) a call is one pass whatever its rows (``one_pass``). A call holds
at most ``budget`` rows (the exact block size: more would not score exactly), so a joint plan
never asks for more; and while a request reads its prompt every drafted row would take the place
of one of its prompt tokens, so nobody drafts and speculation never delays a neighbour's first
token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import pairwise

import numpy as np

from spec_decode.drafting.costs import CostCurve


@dataclass(frozen=True)
class Option:
    """Feeding ``rows`` rows to the next call, after ``draft_seconds`` of drafting, is expected
    to emit ``expected`` tokens (``drafter`` names where the drafts come from; "" none)."""

    rows: int
    expected: float
    draft_seconds: float = 0.0
    drafter: str = ""

    def rate(self, target: Callable[[int], float]) -> float:
        """Expected tokens per second alone, a pass of n rows costing ``target(n)`` seconds."""
        return self.expected / (target(self.rows) + self.draft_seconds)


#: What one request could feed the next call: its options, fewest rows first (one, for a
#: request whose blocks are not planned here: its recent rows).
Offer = tuple[Option, ...]


@dataclass(frozen=True)
class SharedCall:
    """Every running request's offer, in one order all of them see (``mine`` is the asking
    request's), whether one of them is still reading its prompt, the most rows a call holds,
    each offer's sequence id, increasing (empty: 0, 1, 2, ...), and whether a call is one pass
    whatever its rows (a unified cache) rather than llama.cpp's split by sequence."""

    offers: tuple[Offer, ...] = ()
    mine: int = 0
    reading_prompt: bool = False
    budget: int | None = None
    seqs: tuple[int, ...] = ()
    one_pass: bool = False

    @property
    def alone(self) -> bool:
        return len(self.offers) <= 1


#: A request with no neighbours: the planner's solo objective.
ALONE = SharedCall()


def fixed(rows: int) -> Offer:
    """The offer of a request whose blocks are planned elsewhere: ``rows`` rows, one token."""
    return (Option(rows, 1.0),)


def split_passes(rows: tuple[int, ...]) -> tuple[int, ...]:
    """The rows of each pass of a call scoring ``rows[s]`` rows of sequence s, in llama.cpp's
    order (``llama_batch_allocr::split_equal`` on a cache with cells per sequence): a pass takes
    the sequence with rows left that has the lowest id, and the next ids after it while they
    have rows left, as many rows from each as the fewest of them has."""
    left, passes = list(rows), []
    while any(left):
        first = next(seq for seq, count in enumerate(left) if count)
        end = first + 1
        while end < len(left) and left[end]:
            end += 1
        take = min(left[first:end])
        passes.append(take * (end - first))
        for seq in range(first, end):
            left[seq] -= take
    return tuple(passes)


def call_seconds(costs: CostCurve, rows: Sequence[int], one_pass: bool = False) -> float:
    """Seconds of one call scoring ``rows[s]`` rows of sequence s (0: none): one pass where
    ``one_pass``, else a pass for each of :func:`split_passes`."""
    if one_pass:
        return costs.target(sum(rows)) if any(rows) else 0.0
    return sum(costs.target(n) for n in split_passes(tuple(rows)))


def joint_plan(
    costs: CostCurve,
    offers: Sequence[Offer],
    budget: int | None = None,
    seqs: Sequence[int] = (),
    one_pass: bool = False,
) -> list[int]:
    """The option of each offer (its index) that together maximise the product of the
    requests' token rates, within ``budget`` rows a call, the offers feeding sequences ``seqs``
    (increasing; empty: 0, 1, 2, ...), a call being one pass where ``one_pass``: coordinate
    ascent from everyone's first option and from everyone's best option alone, in the offers'
    order (deterministic)."""
    call = _Call(costs, offers, budget, seqs or range(len(offers)), one_pass)
    solo = [
        max(range(len(offer)), key=lambda p, o=offer: (o[p].rate(costs.target), -p))
        for offer in offers
    ]
    return max(call.ascent([0] * len(offers)), call.ascent(solo), key=lambda r: r[0])[1]


@cache
def _runs(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every run of consecutive sequences among ``n``, shortest first, as :meth:`_Call._seconds`
    reads them: each run's length, and its neighbours' columns in counts padded by an empty
    sequence on each side. Made once per ``n``: every request plans before every step."""
    runs = [(first, length) for length in range(1, n + 1) for first in range(n - length + 1)]
    length = np.array([length for _, length in runs])
    left = np.array([first for first, _ in runs])
    return length, left, left + length + 1


class _Call:
    """A call's offers as arrays, so that one offer's every option is valued in one numpy pass:
    every request solves the whole call before every step, trying each option of each offer in
    every sweep, and all of that runs between two decodes."""

    def __init__(
        self,
        costs: CostCurve,
        offers: Sequence[Offer],
        budget: int | None,
        seqs: Sequence[int],
        one_pass: bool = False,
    ) -> None:
        if len(seqs) != len(offers) or any(b <= a for a, b in pairwise(seqs)):
            raise ValueError(f"need one increasing sequence id per offer, got {list(seqs)}")
        self.seqs = list(seqs)
        self.rows = [np.array([o.rows for o in offer]) for offer in offers]
        self.logs = [np.log([o.expected for o in offer]) for offer in offers]
        self.drafting = [np.array([o.draft_seconds for o in offer]) for offer in offers]
        most = sum(int(rows.max()) for rows in self.rows)  # no call prices more rows
        self.most = most if budget is None else min(most, budget)  # beyond: never chosen
        self.price = np.array([0.0] + [costs.target(n) for n in range(1, self.most + 1)])
        self.budget, self.one_pass = budget, one_pass
        self.run_length, self.left, self.right = _runs(self.seqs[-1] + 1)

    def values(self, i: int, picks: Sequence[int]) -> np.ndarray:
        """The joint objective for every option of offer ``i``, the others' ``picks`` kept:
        a call's seconds as :meth:`_seconds` prices them."""
        others = [j for j in range(len(picks)) if j != i]
        counts = np.zeros((len(self.rows[i]), self.seqs[-1] + 3), dtype=np.int64)
        for j in others:
            counts[:, self.seqs[j] + 1] = self.rows[j][picks[j]]
        counts[:, self.seqs[i] + 1] = self.rows[i]
        seconds = self._seconds(counts)
        seconds += sum(self.drafting[j][picks[j]] for j in others) + self.drafting[i]
        logs = sum(self.logs[j][picks[j]] for j in others) + self.logs[i]
        value = logs - len(picks) * np.log(seconds)
        if self.budget is not None:
            value[counts.sum(axis=1) > self.budget] = -np.inf
        return value

    def _seconds(self, padded: np.ndarray) -> np.ndarray:
        """Seconds of the calls whose rows by sequence are the rows of ``padded`` (an empty
        sequence before the first and after the last): one pass of all of them where ``one_pass``,
        else the passes of :func:`split_passes`, all at once. Each pass is a run of consecutive
        sequences that every lower level of the split leaves whole: it takes as many rows from each
        as its fewest has above the level where it parted from its neighbours, the larger of theirs.
        So every run of consecutive sequences is a pass of its length times its fewest rows less its
        neighbours' larger, where that is positive (runs that are no pass come to zero)."""
        if self.one_pass:
            return self.price[np.minimum(padded.sum(axis=1), self.most)]
        inner = padded[:, 1:-1]
        by_length, runs_fewest = [inner], inner  # the fewest rows of each run, by its length
        for length in range(2, inner.shape[1] + 1):
            runs_fewest = np.minimum(runs_fewest[:, :-1], inner[:, length - 1 :])
            by_length.append(runs_fewest)
        fewest = np.concatenate(by_length, axis=1)
        parted = np.maximum(padded[:, self.left], padded[:, self.right])
        rows = np.clip(fewest - parted, 0, None) * self.run_length
        return self.price[np.minimum(rows, self.most)].sum(axis=1)

    def ascent(self, picks: list[int]) -> tuple[float, list[int]]:
        """Coordinate ascent from ``picks``: each offer in turn takes its best option (the
        first of equals) while that beats the current value; (value, picks)."""
        picks = list(picks)
        best = float(self.values(0, picks)[picks[0]])
        improved = True
        while improved:
            improved = False
            for i in range(len(picks)):
                values = self.values(i, picks)
                p = int(np.argmax(values))
                if p != picks[i] and values[p] > best:
                    best, picks[i], improved = float(values[p]), p, True
        return best, picks
