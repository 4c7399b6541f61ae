"""The OpenAI-compatible HTTP API over one engine: ``/v1/models``, ``/v1/chat/completions`` and
``/v1/completions`` (streamed as server-sent events or not), ``/health`` and ``/metrics``.

Every request body is read here, not by the framework, so that each way a body can be wrong gets
a 4xx with an OpenAI-style error (:class:`~spec_decode.serving.schemas.APIError`): over the size
limit (413), not UTF-8, not JSON or not an object (400), fields out of range (400), an unknown
model (404), a prompt that does not fit the context window with its token limit (400), a full
queue (429 with ``Retry-After``), a server shutting down (503). Generations run on the
:class:`~spec_decode.serving.worker.Worker`'s thread; a stream whose client goes away sets its
job's cancellation event, which the engine checks before every step.

``usage`` carries ``prompt_tokens``, ``completion_tokens``, ``total_tokens``, the prompt tokens
reused from the previous request's KV cache (``prompt_tokens_details.cached_tokens``) and a
``speculative`` block: target passes, drafted and accepted tokens, acceptance rate, tokens per
pass and steps by drafter. A non-standard ``engine_timings`` object says where the request's
time went on the server: queued, first step, whole generation (not llama-server's ``timings``,
whose fields differ).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse

from spec_decode.serving.engine import Completion, speculative_figures
from spec_decode.serving.metrics import Metrics
from spec_decode.serving.schemas import (
    APIError,
    ChatRequest,
    CompletionRequest,
    SamplingFields,
    parse,
)
from spec_decode.serving.worker import Closed, Job, QueueFull, Worker

#: The largest request body accepted, in bytes.
MAX_BODY = 1 << 20
#: The longest the engine waits, after a streamed step, for the event loop to send it.
HANDOFF_S = 0.02


@dataclass(frozen=True)
class Settings:
    """What the server is told at start: the name it serves the model under, the API key (None:
    no authentication), the cap on tokens per request, the body size limit, and how long a
    stream may go on once shutdown began."""

    model_name: str
    api_key: str | None = None
    max_tokens: int = 1024
    max_body: int = MAX_BODY
    grace_s: float = 10.0


def create_app(worker: Worker, settings: Settings) -> FastAPI:
    """The FastAPI application serving ``worker``'s engine."""
    app = FastAPI(title="spec-decode", docs_url=None, redoc_url=None, openapi_url=None)
    metrics = Metrics(worker)
    engine = worker.engine
    created = int(time.time())

    @app.exception_handler(APIError)
    async def api_error(request: Request, error: APIError) -> JSONResponse:
        metrics.refused(request.url.path, error.status)
        return JSONResponse(error.body(), status_code=error.status, headers=error.headers)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, error: Exception) -> JSONResponse:
        metrics.refused(request.url.path, 500)
        failure = APIError(500, f"internal error: {type(error).__name__}", kind="server_error")
        return JSONResponse(failure.body(), status_code=500)

    @app.exception_handler(404)
    async def not_found(request: Request, _: Exception) -> JSONResponse:
        error = APIError(404, f"no route {request.method} {request.url.path}", code="not_found")
        return JSONResponse(error.body(), status_code=404)

    @app.exception_handler(405)
    async def not_allowed(request: Request, _: Exception) -> JSONResponse:
        error = APIError(405, f"{request.method} is not allowed on {request.url.path}")
        return JSONResponse(error.body(), status_code=405)

    def authorize(request: Request) -> None:
        if settings.api_key is None:
            return
        given = request.headers.get("authorization", "")
        expected = f"Bearer {settings.api_key}"
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise APIError(
                401,
                "missing or wrong API key (send Authorization: Bearer KEY)",
                kind="authentication_error",
                code="invalid_api_key",
            )

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "busy": worker.busy, "waiting": worker.waiting}

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.exposition(), media_type=metrics.content_type)

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        authorize(request)
        card = {"id": settings.model_name, "object": "model", "created": created}
        return {"object": "list", "data": [card | {"owned_by": "spec-decode"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        authorize(request)
        body = parse(ChatRequest, await read_json(request, settings.max_body))
        check_model(body.model)
        messages = [m.as_template_input() for m in body.messages]
        try:
            prompt = engine.encode_chat(messages)
        except ValueError as error:  # no template, or one that refuses this conversation
            raise APIError(400, str(error), param="messages") from error
        return await respond(request, body, prompt, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        authorize(request)
        body = parse(CompletionRequest, await read_json(request, settings.max_body))
        check_model(body.model)
        text = body.prompt_text()
        prompt = engine.encode(text, raw=True) if text is not None else list(body.prompt)
        return await respond(request, body, prompt, chat=False)

    def check_model(name: str) -> None:
        if name != settings.model_name:
            raise APIError(
                404,
                f"model {name!r} is not served here; GET /v1/models lists {settings.model_name!r}",
                param="model",
                code="model_not_found",
            )

    async def respond(
        request: Request, body: SamplingFields, prompt: list[int], chat: bool
    ) -> Response:
        job = make_job(body, prompt)
        kind = "chat.completion" if chat else "text_completion"
        ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        head = {"id": ident, "created": int(time.time()), "model": settings.model_name}
        path = request.url.path
        if body.stream:
            loop = asyncio.get_running_loop()
            pieces: asyncio.Queue[tuple[list[int], str] | None] = asyncio.Queue()
            sent = threading.Event()

            def on_step(tokens: list[int], text: str) -> None:
                # Send each step before the next decode rather than during it: llama.cpp's
                # threads spin at barriers, so on a machine with as many cores as threads the
                # event loop's work, run while a decode runs, preempts one of them and stalls
                # the rest. The wait is bounded: a busy loop delays a step, never stops it.
                sent.clear()
                loop.call_soon_threadsafe(pieces.put_nowait, (tokens, text))
                sent.wait(HANDOFF_S)

            job.on_step = on_step
            future = submit(job, path)
            future.add_done_callback(lambda _: loop.call_soon_threadsafe(pieces.put_nowait, None))
            events = stream(job, future, pieces, sent, head, kind, chat, body.return_token_ids)
            return EventSourceResponse(events, ping=15, shutdown_grace_period=settings.grace_s)
        future = submit(job, path)
        try:
            completion = await asyncio.wrap_future(future)
        except asyncio.CancelledError as error:
            if future.cancelled() and worker.closed:  # dropped from the queue at shutdown
                raise APIError(503, "the server is shutting down", kind="server_error") from error
            job.cancel.set()
            future.cancel()
            raise
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish_reason(completion)}
        if chat:
            choice["message"] = {"role": "assistant", "content": completion.text}
        else:
            choice["text"] = completion.text
        choice["logprobs"] = None
        if body.return_token_ids:
            choice["token_ids"] = completion.tokens
        payload = head | {"object": kind, "choices": [choice], "usage": usage(completion)}
        return JSONResponse(payload | {"engine_timings": timings(completion, job)})

    def make_job(body: SamplingFields, prompt: list[int]) -> Job:
        param = "messages" if isinstance(body, ChatRequest) else "prompt"
        if not prompt:
            raise APIError(400, "the prompt is empty", param=param)
        vocab = engine.target.model.vocab_size
        if min(prompt) < 0 or max(prompt) >= vocab:
            raise APIError(400, f"token ids must lie in [0, {vocab})", param=param)
        asked = body.requested_tokens()
        room = engine.context_window - len(prompt)
        max_tokens = min(max(room, 1) if asked is None else asked, settings.max_tokens)
        try:
            engine.check_fits(len(prompt), max_tokens)
            sampling = body.sampling()
        except ValueError as error:
            code = "context_length_exceeded" if "context window" in str(error) else None
            raise APIError(400, str(error), param=param, code=code) from error
        return Job(prompt, max_tokens, sampling, body.seed, body.stop_strings(), rule=body.rule)

    def submit(job: Job, path: str) -> Future[Completion]:
        try:
            future = worker.submit(job)
        except QueueFull as error:
            raise APIError(
                429,
                f"the server is busy: {error}; retry later",
                kind="rate_limit_error",
                code="queue_full",
                headers={"Retry-After": "1"},
            ) from error
        except Closed as error:
            raise APIError(503, str(error), kind="server_error", code="shutting_down") from error
        future.add_done_callback(lambda done: metrics.finished(path, done))
        return future

    async def stream(
        job: Job,
        future: Future[Completion],
        pieces: asyncio.Queue[tuple[list[int], str] | None],
        sent: threading.Event,
        head: dict[str, Any],
        kind: str,
        chat: bool,
        token_ids: bool,
    ) -> AsyncIterator[str]:
        """The stream's events; ``sent`` is set once each step's event went out (or had none)."""
        kind = f"{kind}.chunk" if chat else kind
        first = True
        try:
            while (item := await pieces.get()) is not None:
                tokens, text = item
                if not text and not (token_ids and tokens):
                    sent.set()
                    continue
                if first:
                    metrics.first_token(job)
                delta: dict[str, Any] = {"content": text}
                if chat and first:
                    delta = {"role": "assistant", "content": text}
                choice: dict[str, Any] = {"index": 0, "finish_reason": None}
                choice |= {"delta": delta} if chat else {"text": text, "logprobs": None}
                if token_ids:
                    choice["token_ids"] = tokens
                first = False
                yield json.dumps(head | {"object": kind, "choices": [choice]})
                sent.set()  # the response resumes this generator once the event was sent
            failure = None
            if future.cancelled():  # dropped from the queue at shutdown
                failure = APIError(503, "the server is shutting down", kind="server_error")
            elif (problem := future.exception()) is not None:
                failure = APIError(500, f"internal error: {type(problem).__name__}", "server_error")
            if failure is not None:  # the status line went out already: say it in the stream
                yield json.dumps(failure.body())
                yield "[DONE]"
                return
            completion = future.result()
        except BaseException:  # the client went away (or the server is stopping): cancel
            job.cancel.set()
            sent.set()
            future.cancel()
            raise
        end: dict[str, Any] = {"index": 0, "finish_reason": finish_reason(completion)}
        end |= {"delta": {}} if chat else {"text": "", "logprobs": None}
        final = head | {"object": kind, "choices": [end], "usage": usage(completion)}
        yield json.dumps(final | {"engine_timings": timings(completion, job)})
        yield "[DONE]"

    return app


def finish_reason(completion: Completion) -> str:
    """The OpenAI finish reason: "stop" or "length"; a generation cut by the server's timeout
    or shutdown ends as at a token limit ("length")."""
    return "length" if completion.finish_reason == "cancelled" else completion.finish_reason


def usage(completion: Completion) -> dict[str, Any]:
    """The response's ``usage``: token counts, cached prompt tokens, and what drafting did."""
    n = len(completion.tokens)
    return {
        "prompt_tokens": completion.prompt_tokens,
        "completion_tokens": n,
        "total_tokens": completion.prompt_tokens + n,
        "prompt_tokens_details": {"cached_tokens": completion.cached_tokens},
        "speculative": speculative_figures(completion.trace),
    }


def timings(completion: Completion, job: Job) -> dict[str, float]:
    """Where a request's time went on the server, in milliseconds: waiting in the queue, the
    first step (prompt read plus one pass) and the whole generation."""
    return {
        "queued_ms": 1e3 * (job.started - job.submitted),
        "first_step_ms": 1e3 * completion.first_step_seconds,
        "generation_ms": 1e3 * completion.seconds,
    }


async def read_json(request: Request, limit: int) -> Any:
    """The request body as JSON: at most ``limit`` bytes, UTF-8, parsed (4xx otherwise)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise APIError(413, f"the request body exceeds {limit} bytes", code="body_too_large")
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            raise APIError(413, f"the request body exceeds {limit} bytes", code="body_too_large")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise APIError(400, f"the request body is not UTF-8: {error}") from error
    try:
        body = json.loads(text)
    except json.JSONDecodeError as error:
        raise APIError(400, f"the request body is not JSON: {error}") from error
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    return body
