"""The engine's threads, fed by a bounded first-in-first-out queue.

The engine is loaded on one thread, the engine's, and every llama.cpp decode comes from it:
llama.cpp's OpenMP build keeps a team of threads for each thread that calls it, and once two
calling threads have run decodes, the teams' waiting threads compete with the working ones for
the cores for the rest of the process (BENCHMARKS.md). With one slot, requests run on that thread,
one at a time, in arrival order. With several (:mod:`.slots`), each running request has a thread of
its own, whose models post their rows, and the engine's thread decodes what they posted together
(:class:`~spec_decode.backends.llamacpp.slots.Stepper`).

:meth:`Worker.submit` refuses a job when every slot is busy and ``max_queue`` jobs are already
waiting (:class:`QueueFull`: the server answers 429) or once shutdown began (:class:`Closed`).
Every job carries its own cancellation event; a job also ends once it ran ``timeout_s`` seconds,
and :meth:`Worker.close` drops the waiting jobs and gives the running ones ``grace_s`` seconds
before cancelling them; :meth:`Worker.join` waits for them and then closes the engine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from spec_decode.serving.completion import Completion, StepCallback
from spec_decode.serving.engine import Engine
from spec_decode.serving.request import GenerationRequest


class QueueFull(Exception):
    """The queue already holds ``max_queue`` waiting jobs."""


class Closed(Exception):
    """The worker is shutting down and takes no new jobs."""


@dataclass(eq=False)  # a job is itself: hashed by identity
class Job:
    """One request to run, with its step callback, its own cancellation event and its times."""

    request: GenerationRequest
    on_step: StepCallback | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    timed_out: bool = False
    submitted: float = 0.0  # time.monotonic() at submission
    started: float = 0.0  # and when it began running


class Worker:
    """Runs :class:`Job` s, as many at once as the engine has slots, in arrival order, on the
    engine ``load`` returns when called on the engine's thread (its errors are raised here, and
    no thread is left behind)."""

    def __init__(
        self, load: Callable[[], Engine], max_queue: int, timeout_s: float | None = None
    ) -> None:
        if max_queue < 0:
            raise ValueError(f"max_queue must be >= 0, got {max_queue}")
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.max_queue, self.timeout_s = max_queue, timeout_s
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")
        try:
            self.engine = self._executor.submit(load).result()
        except BaseException:
            self._executor.shutdown(wait=False)
            raise
        self.slots: int = getattr(self.engine, "n_slots", 1)
        batchers = getattr(self.engine, "batchers", [])
        self._stepper, self._requests = None, self._executor
        if batchers:
            from spec_decode.backends.llamacpp.slots import Stepper

            self._stepper = Stepper(batchers)
            self._executor.submit(self._stepper.run)
        if self.slots > 1:
            self._requests = ThreadPoolExecutor(self.slots, thread_name_prefix="request")
        self._lock = threading.Lock()
        self._outstanding = 0  # submitted and not finished: the running jobs plus the waiting
        self._running: set[Job] = set()
        self._closed = False

    @property
    def waiting(self) -> int:
        """Jobs submitted and not yet started."""
        with self._lock:
            return self._outstanding - len(self._running)

    @property
    def busy(self) -> int:
        """Jobs running now (at most :attr:`slots`)."""
        with self._lock:
            return len(self._running)

    def submit(self, job: Job) -> Future[Completion]:
        """Queue ``job``; its future gives the :class:`Completion` (or the engine's error)."""
        with self._lock:
            if self._closed:
                raise Closed("the server is shutting down")
            if self._outstanding >= self.slots + self.max_queue:  # slots busy, queue full
                raise QueueFull(f"{self.max_queue} requests are already waiting")
            self._outstanding += 1
        job.submitted = time.monotonic()
        try:
            future = self._requests.submit(self._run, job)
        except RuntimeError as error:  # the executor shut down in between
            with self._lock:
                self._outstanding -= 1
            raise Closed("the server is shutting down") from error
        future.add_done_callback(self._done)
        return future

    def _done(self, _: Future[Completion]) -> None:
        with self._lock:
            self._outstanding -= 1

    def _run(self, job: Job) -> Completion:
        with self._lock:
            self._running.add(job)
        job.started = time.monotonic()
        try:
            return self.engine.generate(
                job.request, on_step=job.on_step, cancel=self._cancel_check(job)
            )
        finally:
            with self._lock:
                self._running.discard(job)

    def _cancel_check(self, job: Job) -> Callable[[], bool]:
        deadline = None if self.timeout_s is None else job.started + self.timeout_s

        def cancelled() -> bool:
            if deadline is not None and time.monotonic() > deadline:
                job.timed_out = True
                return True
            return job.cancel.is_set()

        return cancelled

    @property
    def closed(self) -> bool:
        """Whether shutdown began."""
        return self._closed

    def close(self, grace_s: float) -> None:
        """Take no new jobs, drop the waiting ones, and cancel the running ones unless they
        finished within ``grace_s`` seconds; returns at once (:meth:`join` waits)."""
        with self._lock:
            self._closed = True
            running = list(self._running)
        self._requests.shutdown(wait=False, cancel_futures=True)
        for job in running:
            timer = threading.Timer(grace_s, job.cancel.set)
            timer.daemon = True
            timer.start()

    def join(self) -> None:
        """Wait until the last job finished (the engine's thread decoding for them until then),
        then free the engine's models (its ``close``, when it has one) rather than leave them
        to interpreter exit."""
        self._requests.shutdown(wait=True)
        if self._stepper is not None:
            self._stepper.stop()
        self._executor.shutdown(wait=True)
        close = getattr(self.engine, "close", None)
        if close is not None:
            close()
