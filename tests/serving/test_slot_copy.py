"""A request whose prompt begins as a running request's does reads only the rest: the running
slot's cells for the shared prefix are copied into the slot it takes (:mod:`.slots`), and its
answer is still its answer alone, greedy and seeded at T = 0.7. (The rows of a slot that copied
its prefix are certified bitwise, with a negative control, in ``tests/backends/test_slots.py``.)"""

from __future__ import annotations

import pytest

pytest.importorskip("llama_cpp")

from conftest import running
from exact_rows_mark import needs_exact_rows

from spec_decode.core.sampling import SamplingParams
from spec_decode.serving.config import EngineConfig
from spec_decode.serving.request import RequestOptions
from spec_decode.serving.worker import Job

pytestmark = needs_exact_rows("slots share calls only on the exact-rows build")

#: 80 letters (token ids 4-29 of the tiny vocabulary): the prefix both requests share.
PREFIX = [4 + (7 * i) % 26 for i in range(80)]


@pytest.fixture(scope="module")
def worker(tiny_pair):
    target, draft = tiny_pair
    with running(EngineConfig(target=str(target), draft=str(draft), threads=1, parallel=2), 2) as w:
        yield w


@pytest.mark.parametrize(("temperature", "seed"), [(0.0, None), (0.7, 3)])
def test_a_prompt_sharing_a_running_requests_prefix_copies_it_and_answers_as_alone(
    worker, cold, temperature, seed
):
    engine = worker.engine
    engine.forget()  # no slot holds the prefix yet
    options = RequestOptions(sampling=SamplingParams(temperature=temperature), seed=seed)
    first = engine.prepare([*PREFIX, 5], options, max_tokens=8)
    worker.submit(Job(first)).result()  # its slot's cache: that prompt and its answer
    with engine.slots.take(first.prompt, reuse=True) as busy:  # as a request running there
        engine.slots.prompt_read(busy)
        second = engine.prepare([*PREFIX, 6, 7], options, max_tokens=30)
        done = worker.submit(Job(second)).result()
    assert done.cached_tokens == len(PREFIX)
    cold.forget()
    expected = cold.generate(cold.prepare([*PREFIX, 6, 7], options, max_tokens=30))
    assert done.tokens == expected.tokens


def test_requests_sent_together_read_their_shared_prefix_once(worker, cold):
    """Two requests sharing an 80-token prefix, sent at once to a server that holds none of it:
    one reads the prefix and the other, waiting for it, copies its cells; each answer is its
    answer alone."""
    engine = worker.engine
    engine.forget()
    options = RequestOptions(sampling=SamplingParams(temperature=0.7), seed=11)
    prompts = [[*PREFIX, 8], [*PREFIX, 9, 10]]
    jobs = [worker.submit(Job(engine.prepare(p, options, max_tokens=30))) for p in prompts]
    done = [job.result() for job in jobs]
    assert sorted(d.cached_tokens for d in done) == [0, len(PREFIX)]
    for prompt, answer in zip(prompts, done, strict=True):
        cold.forget()
        assert answer.tokens == cold.generate(cold.prepare(prompt, options, max_tokens=30)).tokens
