"""Which slot a new request takes: the free one whose cache shares the longest prefix with its
prompt, else the one used least recently; and when a busy slot's cache holds a longer prefix,
its cells copied into the slot taken."""

from __future__ import annotations

from spec_decode.serving.slots import MIN_COPIED, SlotTable


class Cached:
    """A model whose cache holds ``cached``."""

    def __init__(self, cached: list[int]) -> None:
        self.cached = cached
        self.adopted: list[tuple[Cached, list[int]]] = []

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


def test_a_busy_slots_published_prefix_is_copied_when_it_saves_enough():
    shared = list(range(100, 100 + MIN_COPIED + 10))
    table = SlotTable([Cached([]), Cached(shared[:8]), Cached(shared[:8])], None)
    with table.take([7, 7]) as first:
        table.publish(first, [*shared, 1])  # its cache now holds a prefix of this prompt
        with table.take([*shared[: MIN_COPIED + 7], 3], copy=True) as near:
            assert near.target.adopted == []  # 39 tokens: not MIN_COPIED more than its own 8
        with table.take([*shared, 2], copy=True) as far:
            assert far.target.adopted == [(first.target, shared)]
    assert first.prompt is None  # free again: its request's cells are no longer published


def test_nothing_is_copied_unless_asked_and_one_token_is_left_to_read():
    prompt = list(range(MIN_COPIED + 5))
    table = SlotTable([Cached([]), Cached([])], None)
    with table.take(prompt) as first:
        table.publish(first, prompt)
        with table.take(prompt) as second:
            assert second.target.adopted == []
        with table.take(prompt, copy=True) as second:
            assert second.target.adopted == [(first.target, prompt[:-1])]
