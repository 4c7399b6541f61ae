"""Which slot a new request takes: the free one whose cache shares the longest prefix with its
prompt, else the one used least recently; and when a busy slot's cache holds a longer prefix,
its cells copied into the slot taken."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from spec_decode.serving.slots import MIN_COPIED, SlotTable


class Cached:
    """A model whose cache holds ``cached``."""

    def __init__(self, cached: list[int]) -> None:
        self.cached = cached
        self.adopted: list[tuple[Cached, list[int]]] = []

    def keep_reusable(self, prompt):
        self.cached = self.cached[: len(prompt) - self.unread(prompt)]
        return len(self.cached)

    def reset(self):
        self.cached = []

    def adopt(self, donor, prefix):
        self.adopted.append((donor, list(prefix)))
        self.cached = list(prefix)
        return len(prefix)

    def unread(self, sequence):
        kept = 0
        while kept < min(len(sequence), len(self.cached)) and sequence[kept] == self.cached[kept]:
            kept += 1
        return len(sequence) - kept


def test_a_request_takes_the_slot_sharing_its_prefix_else_the_least_recently_used():
    table = SlotTable([Cached([1, 2, 3]), Cached([1, 2, 9, 9]), Cached([])], None)
    with table.take([1, 2, 9, 5]) as slot:
        assert slot.index == 1
        with table.take([1, 2, 3, 4]) as other:
            assert other.index == 0
    table.slots[2].last_used = -1.0  # never used: least recently
    with table.take([7, 7]) as slot:
        assert slot.index == 2


def test_a_busy_slots_prefix_is_copied_when_it_saves_enough():
    shared = list(range(100, 100 + MIN_COPIED + 10))
    table = SlotTable([Cached([]), Cached(shared[:8]), Cached(shared[:8])], None)
    with table.take([*shared, 1], reuse=True) as first:
        assert first.index == 1 and first.kept == 8
        table.prompt_read(first)
        with table.take([*shared[: MIN_COPIED + 7], 3], reuse=True) as near:
            assert near.index == 2 and near.target.adopted == []  # 39: not 32 more than 8
        with table.take([*shared, 2], reuse=True) as far:
            assert far.target.adopted == [(first.target, shared)] and far.kept == len(shared)
    assert first.prompt is None  # free again: its request's cells are no longer offered


def test_nothing_is_copied_unless_asked_and_one_token_is_left_to_read():
    prompt = list(range(MIN_COPIED + 5))
    table = SlotTable([Cached([]), Cached([])], None)
    with table.take(prompt) as first:
        table.prompt_read(first)
        with table.take(prompt) as second:
            assert second.target.adopted == [] and second.kept == 0
        with table.take(prompt, reuse=True) as second:
            assert second.target.adopted == [(first.target, prompt[:-1])]


@pytest.mark.parametrize("donor_ends", [False, True])
def test_a_donor_still_reading_its_prompt_is_waited_for_unless_it_ends(donor_ends):
    prompt = list(range(MIN_COPIED + 5))
    table = SlotTable([Cached([]), Cached([])], None)
    with ThreadPoolExecutor(1) as pool:
        with table.take(prompt, reuse=True) as first:
            newcomer = pool.submit(lambda: table.take(prompt, reuse=True).__enter__())  # kept
            time.sleep(0.05)
            assert not newcomer.done()  # waiting for the first to read its prompt
            if not donor_ends:
                table.prompt_read(first)
                newcomer.result()
        second = newcomer.result()
    assert second.target.adopted == ([] if donor_ends else [(first.target, prompt[:-1])])
