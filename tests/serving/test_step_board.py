"""The step board: what each running request posts for its neighbours' planners."""

from __future__ import annotations

from spec_decode.core.trace import Step
from spec_decode.drafting.neighbours import ALONE, Neighbours
from spec_decode.serving.step_board import WINDOW, StepBoard


def stepping(steps: list[Step]):
    pending = iter(steps)
    return lambda context, remaining, trace, source: next(pending)


def test_a_request_reads_its_prompt_until_its_first_step_ends():
    board = StepBoard()
    with board.running(0), board.running(1):
        assert board.neighbours(0) == Neighbours((1,), reading_prompt=True)
        board.posting(1, stepping([Step([5])]))([], 4, None, None)
        assert board.neighbours(0) == Neighbours((1,))
        assert board.neighbours(1) == Neighbours((1,), reading_prompt=True)  # 0 posted none
    assert board.neighbours(0) == ALONE


def test_each_neighbour_posts_its_recent_mean_rows():
    board = StepBoard()
    blocks = [Step([1] * 9, drafted=15, accepted=8)] * WINDOW + [Step([1])] * WINDOW
    with board.running(0), board.running(1), board.running(2):
        one, two = board.posting(1, stepping(blocks)), board.posting(2, stepping([Step([1])] * 9))
        for _ in range(WINDOW):
            one([], 99, None, None)
            two([], 99, None, None)
        assert board.neighbours(0) == Neighbours((16, 1))
        for _ in range(WINDOW):  # only the last WINDOW steps count
            one([], 99, None, None)
        assert board.neighbours(0) == Neighbours((1, 1))
        assert board.neighbours(1) == Neighbours((1, 1), reading_prompt=True)
