"""A call interrupted for a newcomer leaves every request's rows exact (:class:`.slots.Batcher`).

On the exact-rows build, with the tiny K-quant GGUF: a shared call of blocks and single rows of
four sequences (several micro-batches, since their lengths differ) is stopped after its n-th
graph node, for n across the whole call, and the batcher feeds it again. Every row it hands
back is bitwise the row of a context that never stopped, and the cells left behind score the
next rows bitwise too. The negative control: without dropping the cells the stopped call kept
(llama.cpp drops only those of the micro-batch it stopped in), the rows differ or llama.cpp
refuses the call. And through the engine's path: a prompt posted while a call without prompt
rows is in flight interrupts it, and the cells of a newcomer's slot are cut between calls.
"""

from __future__ import annotations

import ctypes
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")

from exact_rows_mark import needs_exact_rows
from kquant_gguf import write_kquant_gguf

from spec_decode.backends.llamacpp.context import LlamaContext, Row
from spec_decode.backends.llamacpp.library import llama_cpp
from spec_decode.backends.llamacpp.slots import Batcher

pytestmark = needs_exact_rows("the loaded llama.cpp is not the exact-rows build")
WINDOW = 256
SEQS = 4
PROMPTS = [list(range(10 + 7 * s, 30 + 9 * s)) for s in range(SEQS)]
#: The shared call: a block of 6 rows, single rows, a block of 3 (micro-batches of 1, 2 and 3)
BLOCKS = [[101, 102, 103, 104, 105, 106], [111], [121, 122, 123], [131]]
NEXT = [[7, 8], [9], [10], [11, 12]]  # rows scored after it, on the cells it left


@pytest.fixture(scope="module")
def gguf(tmp_path_factory) -> Path:
    return write_kquant_gguf(tmp_path_factory.mktemp("interrupt") / "kquant.gguf")


def rows_after(batch_of: list[list[int]], context: LlamaContext) -> list[Row]:
    return [
        Row(token, context.length(seq) + i, (seq,), True)
        for seq, tokens in enumerate(batch_of)
        for i, token in enumerate(tokens)
    ]


def prompted(gguf: Path) -> LlamaContext:
    context = LlamaContext(gguf, n_threads=2, n_ctx=WINDOW, n_seq=SEQS, unified=False)
    for seq, prompt in enumerate(PROMPTS):
        context.decode([Row(t, i, (seq,), i == len(prompt) - 1) for i, t in enumerate(prompt)])
    return context


@pytest.fixture(scope="module")
def reference(gguf) -> list[np.ndarray]:
    """The shared call's rows and the next call's, on a context that never stopped."""
    context = prompted(gguf)
    scored = [context.decode(rows_after(BLOCKS, context)).copy()]
    scored.append(context.decode(rows_after(NEXT, context)).copy())
    context.close()
    return scored


def stopping_after(nodes: int) -> tuple[object, list[int]]:
    """An abort callback (in Python: a test may take the interpreter's lock at every node) that
    stops the first call at its ``nodes``-th graph node; and the count of nodes seen."""
    seen = [0]

    def stop(_data: ctypes.c_void_p) -> bool:
        seen[0] += 1
        return seen[0] == nodes

    return llama_cpp.ggml_abort_callback(stop), seen


def interrupted_then_fed(gguf: Path, nodes: int, drop: bool) -> tuple[int, list[np.ndarray]]:
    """The shared call through a :class:`Batcher`, stopped at graph node ``nodes`` and fed
    again (cells of the stopped call dropped unless not ``drop``), then the next call: how
    many calls were interrupted, and both calls' rows."""
    context = prompted(gguf)
    callback, _ = stopping_after(nodes)
    llama_cpp.llama_set_abort_callback(context._ctx, callback, None)
    batcher = Batcher(context)
    if not drop:
        batcher._drop = lambda batch: None
    scored: list[np.ndarray] = []
    for tokens in (BLOCKS, NEXT):
        rows = rows_after(tokens, context)
        results: dict[int, np.ndarray | RuntimeError] = {}

        def post(seq: int, rows: list[Row] = rows, results: dict = results) -> None:
            try:
                results[seq] = batcher.decode([r for r in rows if r.seqs == (seq,)])
            except RuntimeError as error:  # llama.cpp refused the call
                results[seq] = error

        threads = [threading.Thread(target=post, args=(seq,)) for seq in range(SEQS)]
        for thread in threads:
            thread.start()
        while batcher.pending < SEQS and all(t.is_alive() for t in threads):
            time.sleep(0.002)
        while any(t.is_alive() for t in threads):
            if not batcher.step():
                batcher.wait(0.005)
        for thread in threads:
            thread.join()
        for result in results.values():
            if isinstance(result, RuntimeError):
                context.close()
                raise result
        scored.append(np.concatenate([results[seq] for seq in range(SEQS)]))
    context.close()
    return batcher.interrupted, scored


def graph_nodes(gguf: Path) -> int:
    """How many times llama.cpp polls the abort callback in the shared call."""
    context = prompted(gguf)
    callback, seen = stopping_after(0)
    llama_cpp.llama_set_abort_callback(context._ctx, callback, None)
    context.decode(rows_after(BLOCKS, context))
    context.close()
    return seen[0]


def test_a_call_stopped_anywhere_and_fed_again_gives_every_row_bitwise(gguf, reference):
    total = graph_nodes(gguf)
    for nodes in sorted({1, 2, total // 3, total // 2, 2 * total // 3, total - 1}):
        interrupted, scored = interrupted_then_fed(gguf, nodes, drop=True)
        assert interrupted == 1, nodes
        for got, want in zip(scored, reference, strict=True):
            assert np.array_equal(got, want), f"stopped at node {nodes} of {total}"


def test_negative_control_keeping_a_stopped_calls_cells_breaks_the_rows(gguf, reference):
    """Stopped in a later micro-batch, the call kept the earlier ones' cells: fed again on top
    of them, rows land at the wrong positions (or llama.cpp refuses the call)."""
    total = graph_nodes(gguf)
    try:
        _, scored = interrupted_then_fed(gguf, 2 * total // 3, drop=False)
    except RuntimeError:
        return  # refused: the control fails, as it must
    assert not all(np.array_equal(g, w) for g, w in zip(scored, reference, strict=True))


def test_a_prompt_post_interrupts_only_a_call_that_reads_no_prompt(gguf):
    context = LlamaContext(gguf, n_threads=2, n_ctx=WINDOW, n_seq=2, unified=False)
    batcher = Batcher(context)
    batcher._interruptible = True  # as while a call of blocks is in flight
    thread = threading.Thread(target=batcher.decode, args=([Row(5, 0, (1,), True)],))
    thread.start()  # a block: no interrupt
    while not batcher.pending:
        time.sleep(0.002)
    assert batcher._interruptible and context._stop.value == 0
    prompt = [Row(t, i, (0,), i == 3) for i, t in enumerate((7, 8, 9, 10))]
    reader = threading.Thread(target=batcher.decode, args=(prompt,))
    reader.start()
    while batcher.pending < 2:
        time.sleep(0.002)
    assert not batcher._interruptible and context._stop.value == 1
    while thread.is_alive() or reader.is_alive():
        batcher.step()  # clears the request first: the next call runs
    assert batcher.interrupted == 0 and batcher.steps == 1
    context.close()


def test_work_between_calls_interrupts_a_call_and_runs_before_the_next(gguf):
    context = LlamaContext(gguf, n_threads=2, n_ctx=WINDOW, n_seq=2, unified=False)
    batcher = Batcher(context)
    batcher._interruptible = True
    ran_on: list[int] = []
    asker = threading.Thread(target=batcher.between_calls, args=(lambda: ran_on.append(1),))
    asker.start()
    while not batcher._tasks:
        time.sleep(0.002)
    assert context._stop.value == 1 and not ran_on
    assert batcher.step() and ran_on == [1]  # no rows posted: the task alone
    asker.join()
    assert batcher.between_calls(lambda: 42) == 42  # no call in flight: at once
    with pytest.raises(ZeroDivisionError):
        batcher.between_calls(lambda: 1 / 0)
    context.close()
