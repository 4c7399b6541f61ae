"""The auto planner on a shared call (:mod:`spec_decode.drafting.shared_call`): alone it plans as
before; requests that could all copy long bet long together; one copying request beside plain
decoders, whose every token its block would delay, bets short; nobody drafts while a request
reads its prompt; and a joint plan never asks a call for more rows than it holds."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from auto_helpers import FLAT, REPEATING, history, planner, watched

from spec_decode import random_markov
from spec_decode.drafting.costs import CostCurve
from spec_decode.drafting.shared_call import (
    ALONE,
    Option,
    SharedCall,
    _Call,
    call_seconds,
    fixed,
    joint_plan,
    split_passes,
)

#: One call of B tokens on this kind of CPU, in one-token passes (shared/README.md).
CALL = CostCurve(
    (1, 2, 3, 4, 8, 12, 16, 24, 32, 48, 64),
    tuple(0.0245 * m for m in (1, 1.53, 2.02, 2.58, 4.04, 5.17, 5.01, 7.46, 8.78, 12.55, 16.5)),
)
COPYING = watched(REPEATING * 4, 16, right=True)  # lookup has been right, 16 ahead, throughout
CODE = REPEATING * 5  # a context from which lookup and suffix propose 16 tokens


def test_alone_plans_as_without_a_shared_call():
    solo = planner(CALL, k_max=16)
    alone = replace(solo, share=lambda offer: ALONE)
    for trace in (COPYING, history(("", 0, 0))):
        assert alone.plan(CODE, trace, 16) == solo.plan(CODE, trace, 16)


def beside(
    *others, reading_prompt: bool = False, budget: int | None = None, one_pass: bool = False
) -> int:
    """The k planned deep in a copy beside requests offering ``others`` (an offer, or "copy":
    the same offer as this request's own)."""

    def share(offer):
        offers = tuple(offer if other == "copy" else other for other in others)
        return SharedCall((offer, *offers), 0, reading_prompt, budget, one_pass=one_pass)

    return replace(planner(CALL, k_max=16), share=share).plan(CODE, COPYING, 16).k


def test_a_copying_request_bets_short_beside_plain_decoders():
    assert beside() >= 15  # alone, a long copy pays
    assert beside(fixed(1), fixed(1), fixed(1)) <= 2  # three plain decoders would each wait


def test_on_one_pass_a_copying_request_bets_beside_a_plain_decoder():
    """On a unified cache a block beside a single token costs its rows, not a pass of its own:
    a copy bets long beside a plain decoder, which split passes would make it leave alone."""
    assert beside(fixed(1)) <= 2
    assert beside(fixed(1), one_pass=True) >= 8
    assert beside(fixed(4), fixed(1), fixed(1), one_pass=True) > beside(
        fixed(4), fixed(1), fixed(1)
    )


def test_requests_that_all_copy_bet_long_together():
    """The trap a planner weighing only its own move falls into: beside plain decoders no single
    request bets first, although all betting together multiplies every rate."""
    assert beside("copy", "copy", "copy") >= 15
    assert beside("copy") >= 15


def test_a_long_block_beside_one_is_cheap():
    assert beside(fixed(16), fixed(16), fixed(16)) >= 15


def test_a_joint_plan_fits_the_call():
    assert beside("copy", "copy", "copy", budget=32) <= 7  # four blocks of at most 8 rows
    assert beside("copy", "copy", "copy", budget=64) >= 15


def test_nothing_is_drafted_while_a_request_reads_its_prompt():
    reading = replace(
        planner(FLAT, random_markov(8, seed=0), k_max=8),
        share=lambda offer: SharedCall((offer, fixed(1)), 0, reading_prompt=True),
    )
    assert reading.plan(CODE, history(*[("draft", 8, 8)] * 10), 16)[:2] == ("", 0)
    assert reading.plan(CODE, COPYING, 16)[:2] == ("", 0)


def test_every_request_solving_the_call_agrees():
    copy = tuple(Option(r, 1 + 0.9 * (r - 1), 0.0, "lookup") for r in range(1, 17))
    chat = (Option(1, 1.1), Option(2, 1.3, 0.0, "suffix"))
    offers = [copy, chat, copy, fixed(1)]
    picks = joint_plan(CALL, offers)
    assert picks == joint_plan(CALL, list(offers))  # deterministic
    assert all(0 <= p < len(o) for p, o in zip(picks, offers, strict=True))


def test_a_call_costs_a_pass_for_every_split_llama_cpp_makes():
    def c(n):
        return CALL.target(n)

    assert call_seconds(CALL, []) == 0.0
    assert call_seconds(CALL, [5]) == c(5)
    assert call_seconds(CALL, [1, 1, 1, 1]) == c(4)  # one token each: one pass
    assert call_seconds(CALL, [1, 16, 1, 1]) == pytest.approx(c(4) + c(15))
    assert call_seconds(CALL, [16, 16, 1, 1]) == pytest.approx(c(4) + c(30))
    assert call_seconds(CALL, [0, 3]) == c(3)
    assert call_seconds(CALL, [1, 0, 1, 1]) == pytest.approx(c(1) + c(2))  # ids not consecutive
    assert call_seconds(CALL, [1, 5, 1, 5]) == pytest.approx(3 * c(4))  # not c(4) + c(8)
    assert call_seconds(CALL, [1, 16, 1, 1], one_pass=True) == c(19)  # a unified cache
    assert call_seconds(CALL, [1, 0, 1, 1], one_pass=True) == c(3)


def split_equal(rows: list[int]) -> list[int]:
    """A transcription of llama.cpp's ``llama_batch_allocr::split_equal(n_ubatch, sequential =
    true)`` (``src/llama-batch.cpp`` of the vendored llama.cpp) on a batch of ``rows[s]`` tokens
    of sequence s in order of sequence, one sequence a token: the rows of each micro-batch."""
    seq_of = [seq for seq, count in enumerate(rows) for _ in range(count)]
    used = [False] * len(seq_of)
    passes = []
    while not all(used):
        chosen: list[int] = []  # the sequence sets of this micro-batch
        for i, seq in enumerate(seq_of):  # accept only increasing, consecutive sequence ids
            if not used[i] and seq not in chosen and (not chosen or seq == chosen[-1] + 1):
                chosen.append(seq)
        unused = {s: [i for i, t in enumerate(seq_of) if t == s and not used[i]] for s in chosen}
        taken = 0
        while all(unused[seq] for seq in chosen):  # add a token of every set while all have one
            for seq in chosen:
                used[unused[seq].pop(0)] = True
                taken += 1
        passes.append(taken)
    return passes


def test_split_passes_is_llama_cpps_split():
    rng = random.Random(0)
    for _ in range(500):
        rows = [rng.choice([0, 0, 1, 1, 2, 3, 5, 16]) for _ in range(rng.randint(1, 6))]
        assert list(split_passes(tuple(rows))) == split_equal(rows), rows


def test_every_option_is_valued_as_the_objective_says():
    """The joint plan values all of an offer's options at once (``_Call.values``); each value
    must be the objective itself: the sum of the requests' log expected tokens minus, for every
    request, the log of the call's seconds (its passes by :func:`call_seconds` and everyone's
    drafting), or minus infinity beyond the budget."""
    rng = random.Random(0)
    for _ in range(200):
        offers = [
            tuple(
                Option(rows, 1.0 + rng.random() * rows, rng.choice([0.0, 0.01 * rows]))
                for rows in sorted(rng.sample(range(1, 40), rng.randint(1, 6)))
            )
            for _ in range(rng.randint(1, 5))
        ]
        budget = rng.choice([None, 16, 64])
        seqs = sorted(rng.sample(range(6), len(offers)))  # the slots' sequence ids, holes too
        picks = [rng.randrange(len(offer)) for offer in offers]
        i = rng.randrange(len(offers))
        one_pass = rng.random() < 0.5
        values = _Call(CALL, offers, budget, seqs, one_pass).values(i, picks)
        for p, value in enumerate(values):
            chosen = [
                offer[q] for offer, q in zip(offers, (*picks[:i], p, *picks[i + 1 :]), strict=True)
            ]
            rows = [o.rows for o in chosen]
            if budget is not None and sum(rows) > budget:
                assert value == -math.inf
                continue
            by_seq = [0] * 6
            for seq, option in zip(seqs, chosen, strict=True):
                by_seq[seq] = option.rows
            seconds = call_seconds(CALL, by_seq, one_pass) + sum(o.draft_seconds for o in chosen)
            expected = sum(math.log(o.expected) for o in chosen) - len(chosen) * math.log(seconds)
            assert value == pytest.approx(expected, rel=1e-12, abs=1e-12)
