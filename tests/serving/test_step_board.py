"""The step board: the offers running requests post for each other's planners."""

from __future__ import annotations

from spec_decode.core.trace import Step
from spec_decode.drafting.shared_call import Option, SharedCall, fixed
from spec_decode.serving.step_board import WINDOW, StepBoard

OFFER = (Option(1, 1.1), Option(9, 6.0, 0.0, "lookup"))


def stepping(steps: list[Step]):
    pending = iter(steps)
    return lambda context, remaining, trace, source: next(pending)


def test_a_request_reads_its_prompt_until_its_first_step_ends():
    board = StepBoard(64)
    with board.running(0), board.running(1):
        assert board.share(0, OFFER) == SharedCall((OFFER, fixed(1)), 0, True, 64, (0, 1))
        board.posting(1, stepping([Step([5])]))([], 4, None, None)
        assert board.share(0, OFFER) == SharedCall((OFFER, fixed(1)), 0, False, 64, (0, 1))
        assert board.share(1, OFFER).reading_prompt  # 0 has finished no step
    with board.running(3):
        assert board.share(3, OFFER).alone
    with board.running(0), board.running(2):  # a slot's key is its sequence id: holes show
        assert board.share(2, OFFER).seqs == (0, 2)


def test_offers_come_in_slot_order_and_a_request_without_one_offers_its_recent_rows():
    board = StepBoard()
    blocks = [Step([1] * 9, drafted=15, accepted=8)] * WINDOW + [Step([1])] * WINDOW
    with board.running(2), board.running(0), board.running(1):
        one, two = board.posting(1, stepping(blocks)), board.posting(2, stepping([Step([1])] * 9))
        for _ in range(WINDOW):
            one([], 99, None, None)
            two([], 99, None, None)
        expected = SharedCall((fixed(1), fixed(16), OFFER), 2, True, None, (0, 1, 2))
        assert board.share(2, OFFER) == expected
        for _ in range(WINDOW):  # only the last WINDOW steps count
            one([], 99, None, None)
        assert board.share(1, OFFER).offers == (fixed(1), OFFER, OFFER)
