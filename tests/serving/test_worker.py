"""The worker's queue, timeout and shutdown, and the server's 429, on an engine that generates
only when told to (so that "busy" lasts as long as the test needs, whatever the machine)."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace
from typing import ClassVar

import pytest

from spec_decode.core.trace import Trace
from spec_decode.serving.completion import Completion
from spec_decode.serving.request import GenerationRequest, RequestOptions
from spec_decode.serving.worker import Closed, Job, QueueFull, Worker


class HeldEngine:
    """Emits nothing until ``release`` is set or its job is cancelled."""

    context_window = 64
    target = SimpleNamespace(model=SimpleNamespace(vocab_size=10))
    n_slots = 1
    batchers: ClassVar[list] = []

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.threads: set[str] = set()

    def generate(self, request: GenerationRequest, *, cancel, **_) -> Completion:
        self.threads.add(threading.current_thread().name)
        self.started.set()
        n = len(request.prompt)
        while not self.release.wait(0.005):
            if cancel():
                return Completion([], "", "cancelled", n, 0, Trace(), 0.0)
        return Completion([1], "x", "length", n, 0, Trace(), 0.0)

    def prepare(self, prompt, options=None, *, max_tokens=None, limit=None, raw=False, tools=None):
        return GenerationRequest((1, 2), max_tokens or limit or 4, options or RequestOptions())


def job() -> Job:
    return Job(GenerationRequest((1, 2), 4))


def test_the_queue_is_bounded_and_first_in_first_out():
    engine = HeldEngine()
    worker = Worker(lambda: engine, max_queue=1)
    running = worker.submit(job())
    engine.started.wait(10)
    waiting = worker.submit(job())
    with pytest.raises(QueueFull):
        worker.submit(job())
    engine.release.set()
    assert running.result(10).finish_reason == "length"
    assert waiting.result(10).finish_reason == "length"
    assert worker.submit(job()).result(10).tokens == [1]  # room again
    worker.close(0)
    worker.join()


def test_a_generation_past_its_timeout_is_cancelled():
    worker = Worker(HeldEngine, max_queue=0, timeout_s=0.05)
    held = job()
    assert worker.submit(held).result(10).finish_reason == "cancelled" and held.timed_out
    worker.close(0)
    worker.join()


def test_shutdown_drops_the_waiting_and_cancels_the_running_after_the_grace():
    engine = HeldEngine()
    worker = Worker(lambda: engine, max_queue=4)
    running = worker.submit(job())
    engine.started.wait(10)
    waiting = worker.submit(job())
    worker.close(grace_s=0.0)
    with pytest.raises(Closed):
        worker.submit(job())
    worker.join()
    assert waiting.cancelled() and running.result(10).finish_reason == "cancelled"


def test_a_full_queue_is_a_429_with_retry_after():
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    from spec_decode.serving.server import create_app
    from spec_decode.serving.state import Settings

    engine = HeldEngine()
    worker = Worker(lambda: engine, max_queue=0)
    app = create_app(worker, Settings("held"))
    body = {"model": "held", "prompt": "ab", "max_tokens": 2}

    async def scenario() -> tuple[httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            first = asyncio.create_task(client.post("/v1/completions", json=body))
            await asyncio.to_thread(engine.started.wait, 10)
            refused = await client.post("/v1/completions", json=body)
            engine.release.set()
            return await first, refused

    served, refused = asyncio.run(scenario())
    assert served.status_code == 200 and served.json()["choices"][0]["text"] == "x"
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["type"] == "rate_limit_error"
    worker.close(0)
    worker.join()


def test_the_engine_is_loaded_on_the_thread_that_runs_every_generation():
    """llama.cpp's OpenMP build keeps a thread team per calling thread: loading (calibration,
    warm-up) on one thread and generating on another leaves two teams competing for the
    cores, so the worker loads the engine on its own thread."""
    threads: list[int] = []

    class RecordingEngine(HeldEngine):
        def __init__(self) -> None:
            super().__init__()
            threads.append(threading.get_ident())
            self.release.set()

        def generate(self, request, **kwargs) -> Completion:
            threads.append(threading.get_ident())
            return super().generate(request, **kwargs)

    worker = Worker(RecordingEngine, max_queue=2)
    for _ in range(2):
        worker.submit(job()).result(10)
    worker.close(0)
    worker.join()
    assert len(threads) == 3 and len(set(threads)) == 1 and threads[0] != threading.get_ident()


def test_an_engine_that_fails_to_load_raises_and_leaves_no_thread():
    before = threading.active_count()

    def broken() -> HeldEngine:
        raise ValueError("no GGUF model file at nowhere.gguf")

    with pytest.raises(ValueError, match="no GGUF"):
        Worker(broken, max_queue=1)
    for _ in range(100):
        if threading.active_count() == before:
            break
        threading.Event().wait(0.01)
    assert threading.active_count() == before


def test_join_closes_the_engine_once_its_last_job_ended():
    """Shutdown frees the models itself, after the running generation ended, rather than leave
    them to the garbage collector at interpreter exit (where freeing llama.cpp's would fail:
    test_server.py)."""

    class ClosingEngine(HeldEngine):
        def __init__(self) -> None:
            super().__init__()
            self.closed_while_running: list[bool] = []

        def close(self) -> None:
            self.closed_while_running.append(not self.release.is_set())

    engine = ClosingEngine()
    worker = Worker(lambda: engine, max_queue=1)
    running = worker.submit(job())
    engine.started.wait(10)
    worker.close(grace_s=60)
    threading.Timer(0.05, engine.release.set).start()
    worker.join()
    assert running.result(0).finish_reason == "length"
    assert engine.closed_while_running == [False]


def test_with_several_slots_jobs_run_at_once_and_the_queue_counts_beyond_them():
    """Two slots: two jobs run at once, each on a request thread of its own (the engine's
    thread only decodes), one more waits, and the next is refused."""

    class TwoSlots(HeldEngine):
        n_slots = 2

    engine = TwoSlots()
    worker = Worker(lambda: engine, max_queue=1)
    futures = [worker.submit(job()) for _ in range(3)]
    deadline = time.monotonic() + 10
    while worker.busy < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert (worker.busy, worker.waiting) == (2, 1)
    with pytest.raises(QueueFull):
        worker.submit(job())
    engine.release.set()
    assert [f.result(10).finish_reason for f in futures] == ["length"] * 3
    assert engine.threads and all(name.startswith("request") for name in engine.threads)
    worker.close(0.1)
    worker.join()
