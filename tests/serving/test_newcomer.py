"""A newcomer does not wait for the call in flight: its slot's cells are cut between calls and
its prompt interrupts a call that reads no prompt (:mod:`spec_decode.backends.llamacpp.slots`),
and every answer is still its answer alone, greedy and seeded at T = 0.7 under the coupled rule.
(The rows of an interrupted call are certified bitwise, with a negative control, in
``tests/backends/test_interrupt.py``.)

The tiny models decode a call in well under a millisecond, so each call of the target here first
sleeps a while, inside the call: a newcomer arriving then stops it at its first graph node."""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("llama_cpp")

from conftest import running
from exact_rows_mark import needs_exact_rows

from spec_decode.core.sampling import SamplingParams
from spec_decode.serving.config import EngineConfig
from spec_decode.serving.request import RequestOptions
from spec_decode.serving.worker import Job

pytestmark = needs_exact_rows("calls are interrupted only on the exact-rows build")

SLOW_CALL_S = 0.02


@pytest.fixture(scope="module")
def worker(tiny_pair):
    target, draft = tiny_pair
    config = EngineConfig(
        target=str(target), draft=str(draft), threads=1, parallel=3, policy="fixed", k=3
    )
    with running(config, 3) as worker:
        context = worker.engine.batchers[0].context
        decode = context.decode

        def slow(rows):
            time.sleep(SLOW_CALL_S)  # as a real model's call: an interrupt lands in it
            return decode(rows)

        context.decode = slow
        yield worker


@pytest.mark.parametrize(("temperature", "seed"), [(0.0, None), (0.7, 5)])
def test_newcomers_interrupt_the_call_in_flight_and_answer_as_alone(
    worker, cold, temperature, seed
):
    engine = worker.engine
    batcher = engine.batchers[0]
    engine.forget()
    options = RequestOptions(sampling=SamplingParams(temperature=temperature), seed=seed)
    asked = [(engine.encode("abcabcabcabc", raw=True), 40)]
    asked += [(engine.encode(text, raw=True), 12) for text in ("hello there", "zyx wvu tsr")]
    streaming = threading.Event()
    first = engine.prepare(asked[0][0], options, max_tokens=asked[0][1])
    jobs = [worker.submit(Job(first, on_step=lambda piece: streaming.set()))]
    assert streaming.wait(30)
    interrupted = batcher.interrupted
    for prompt, tokens in asked[1:]:
        time.sleep(SLOW_CALL_S * 2.5)  # arrives during a call
        jobs.append(worker.submit(Job(engine.prepare(prompt, options, max_tokens=tokens))))
    answers = [job.result() for job in jobs]
    assert batcher.interrupted > interrupted
    for (prompt, tokens), answer in zip(asked, answers, strict=True):
        cold.forget()
        assert (
            answer.tokens == cold.generate(cold.prepare(prompt, options, max_tokens=tokens)).tokens
        )
