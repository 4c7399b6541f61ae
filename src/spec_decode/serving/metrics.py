"""The server's Prometheus metrics (``GET /metrics``, the text exposition format).

Counters of requests by route and status, of prompt, reused-prompt and generated tokens, of
target passes and of drafted and accepted tokens; histograms of generation time and of time to
the first streamed text; gauges of the queue, of the slots (busy and in all) and of the target
decodes shared by several requests. Each server has its own registry, so several apps
in one process (tests) do not collide.
"""

from __future__ import annotations

import time
from concurrent.futures import Future

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from spec_decode.serving.completion import Completion
from spec_decode.serving.worker import Job, Worker

_PREFIX = "spec_decode"


class Metrics:
    """What the server counts, in a registry of its own."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, worker: Worker) -> None:
        self.registry = registry = CollectorRegistry()
        self.requests = Counter(
            f"{_PREFIX}_requests", "Requests answered", ["route", "status"], registry=registry
        )
        self.tokens = Counter(
            f"{_PREFIX}_tokens", "Tokens by kind", ["kind"], registry=registry
        )  # prompt, cached (reused prompt), generated, drafted, accepted
        self.generations = Counter(
            f"{_PREFIX}_generations", "Generations by finish reason", ["reason"], registry=registry
        )  # stop, length, cancelled (client gone, timeout or shutdown)
        self.passes = Counter(f"{_PREFIX}_target_passes", "Target passes", registry=registry)
        self.seconds = Histogram(
            f"{_PREFIX}_generation_seconds", "Seconds a generation ran", registry=registry
        )
        self.first = Histogram(
            f"{_PREFIX}_time_to_first_text_seconds",
            "Seconds from a streamed request's arrival to its first text",
            registry=registry,
        )
        waiting = Gauge(f"{_PREFIX}_queue_waiting", "Requests waiting", registry=registry)
        waiting.set_function(lambda: worker.waiting)
        busy = Gauge(f"{_PREFIX}_busy", "Generations running (slots busy)", registry=registry)
        busy.set_function(lambda: float(worker.busy))
        slots = Gauge(f"{_PREFIX}_slots", "Generations that may run at once", registry=registry)
        slots.set_function(lambda: float(worker.slots))
        batchers = getattr(worker.engine, "batchers", [])
        shared = Gauge(
            f"{_PREFIX}_shared_decodes",
            "Target decodes that fed more than one request's rows",
            registry=registry,
        )
        shared.set_function(lambda: float(batchers[0].shared_steps) if batchers else 0.0)
        interrupted = Gauge(
            f"{_PREFIX}_interrupted_decodes",
            "Target decodes a newcomer interrupted (fed again with its prompt)",
            registry=registry,
        )
        interrupted.set_function(lambda: float(batchers[0].interrupted) if batchers else 0.0)

    def finished(self, route: str, done: Future[Completion]) -> None:
        """Count a finished generation (whether or not its client is still there)."""
        if done.cancelled() or done.exception() is not None:
            return
        completion = done.result()
        self.requests.labels(route, "200").inc()
        self.generations.labels(completion.finish_reason).inc()
        trace = completion.trace
        for kind, n in (
            ("prompt", completion.prompt_tokens),
            ("cached", completion.cached_tokens),
            ("generated", len(completion.tokens)),
            ("drafted", trace.proposed),
            ("accepted", trace.accepted),
        ):
            self.tokens.labels(kind).inc(n)
        self.passes.inc(trace.target_passes)
        self.seconds.observe(completion.seconds)

    def first_token(self, job: Job) -> None:
        """Record the time to a stream's first text."""
        self.first.observe(time.monotonic() - job.submitted)

    def refused(self, route: str, status: int) -> None:
        """Count a request answered with an error."""
        self.requests.labels(route, str(status)).inc()

    def exposition(self) -> bytes:
        """Every metric in the Prometheus text format."""
        return generate_latest(self.registry)
