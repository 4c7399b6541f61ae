"""The auto planner on a shared call (:mod:`spec_decode.drafting.neighbours`): alone it plans as
before; beside plain decoders, whose every token its block would delay, it bets short; beside
neighbours betting long it bets long too; and it drafts nothing while a neighbour reads its
prompt."""

from __future__ import annotations

from dataclasses import replace

import pytest
from auto_helpers import FLAT, REPEATING, history, planner, watched

from spec_decode import random_markov
from spec_decode.drafting.costs import CostCurve
from spec_decode.drafting.neighbours import ALONE, Neighbours, call_seconds

#: One call of B tokens on this kind of CPU, in one-token passes (shared/README.md).
CALL = CostCurve(
    (1, 2, 3, 4, 8, 12, 16, 24, 32, 48),
    tuple(0.0245 * m for m in (1, 1.53, 2.02, 2.58, 4.04, 5.17, 5.01, 7.46, 8.78, 12.55)),
)
COPYING = watched(REPEATING * 4, 16, right=True)  # lookup has been right, 16 ahead, throughout
CODE = REPEATING * 5  # a context from which lookup and suffix propose 16 tokens


def test_alone_plans_as_without_neighbours():
    solo = planner(CALL, k_max=16)
    alone = replace(solo, neighbours=lambda: ALONE)
    for trace in (COPYING, history(("", 0, 0))):
        assert alone.plan(CODE, trace, 16) == solo.plan(CODE, trace, 16)


def beside(neighbours: Neighbours) -> int:
    """The k planned deep in a copy beside ``neighbours``."""
    return replace(planner(CALL, k_max=16), neighbours=lambda: neighbours).plan(CODE, COPYING, 16).k


def test_a_long_bet_is_taken_beside_long_bets_and_not_beside_plain_decoders():
    solo = beside(ALONE)
    assert solo >= 15  # alone, a long copy pays
    assert beside(Neighbours((1, 1, 1))) <= 2  # three plain decoders would each wait
    assert beside(Neighbours((16, 16, 16))) >= solo  # three long bets: the call is long anyway


def test_nothing_is_drafted_while_a_neighbour_reads_its_prompt():
    reading = Neighbours((1,), reading_prompt=True)
    auto = replace(planner(FLAT, random_markov(8, seed=0), k_max=8), neighbours=lambda: reading)
    assert auto.plan(CODE, history(*[("draft", 8, 8)] * 10), 16)[:2] == ("", 0)
    assert auto.plan(CODE, COPYING, 16)[:2] == ("", 0)


def test_a_call_costs_a_pass_for_every_split_llama_cpp_makes():
    def c(n):
        return CALL.target(n)

    assert call_seconds(CALL, []) == 0.0
    assert call_seconds(CALL, [5]) == c(5)
    assert call_seconds(CALL, [1, 1, 1, 1]) == c(4)  # one token each: one pass
    assert call_seconds(CALL, [1, 16, 1, 1]) == pytest.approx(c(4) + c(15))
    assert call_seconds(CALL, [16, 16, 1, 1]) == pytest.approx(c(4) + c(30))
    assert call_seconds(CALL, [0, 3]) == c(3)
