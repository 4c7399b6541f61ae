"""Which slot a new request takes: the free one whose cache shares the longest prefix with its
prompt, else the one used least recently."""

from __future__ import annotations

from spec_decode.serving.slots import SlotTable


class Cached:
    """A model whose cache holds ``cached``."""

    def __init__(self, cached: list[int]) -> None:
        self.cached = cached

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
