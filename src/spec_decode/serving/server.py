"""The OpenAI-compatible HTTP API over one engine: ``/v1/models``, ``/v1/chat/completions`` and
``/v1/completions`` (streamed as server-sent events or not), ``/health`` and ``/metrics``.

Every request body is read here, not by the framework, so that each way a body can be wrong gets
a 4xx with an OpenAI-style error (:class:`~spec_decode.serving.schemas.APIError`): over the size
limit (413), not UTF-8, not JSON or not an object (400), fields out of range (400), an unknown
model (404), a prompt or token limit the engine refuses (400 naming the field: a
:class:`~spec_decode.core.errors.BadRequest` from
:meth:`~spec_decode.serving.engine.Engine.prepare`, such as a prompt that does not fit the
context window with its token limit, or ``max_tokens`` above the server's limit), a full queue
(429 with ``Retry-After``), a server shutting down (503). Requests are tokenized off the event
loop, under the tokenizer lock the engine's thread decodes with; generations run on the
:class:`~spec_decode.serving.worker.Worker`'s thread; a stream whose client goes away sets its
job's cancellation event, which the engine checks before every step.

With ``tools``, the model's calls are parsed out of its text into ``tool_calls``
(:mod:`~spec_decode.serving.tool_calls`, written by :mod:`~spec_decode.serving.replies`).

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
from collections.abc import AsyncIterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from spec_decode.core.errors import BadRequest
from spec_decode.serving.completion import Completion, Piece
from spec_decode.serving.logprobs import TokenLogprob
from spec_decode.serving.metrics import Metrics
from spec_decode.serving.replies import Reply, timings
from spec_decode.serving.request import GenerationRequest
from spec_decode.serving.schemas import (
    APIError,
    ChatRequest,
    CompletionRequest,
    SamplingFields,
    parse,
)
from spec_decode.serving.tool_calls import ToolCall, ToolCallText
from spec_decode.serving.worker import Closed, Job, QueueFull, Worker

#: The largest request body accepted, in bytes.
MAX_BODY = 1 << 20
#: The longest the engine waits, after a streamed step, for the event loop to send it.
HANDOFF_S = 0.02


@dataclass(frozen=True)
class Settings:
    """What the server is told at start: the name it serves the model under, the API key (None:
    no authentication), the most tokens a request may ask for (more is a 400; a request that
    names no limit gets the rest of the context window up to it), the body size limit, and how
    long a stream may go on once shutdown began."""

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
        return await respond(request, body, messages, chat=True, tools=body.tool_definitions())

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        authorize(request)
        body = parse(CompletionRequest, await read_json(request, settings.max_body))
        check_model(body.model)
        text = body.prompt_text()
        return await respond(request, body, list(body.prompt) if text is None else text, False)

    def check_model(name: str) -> None:
        if name != settings.model_name:
            raise APIError(
                404,
                f"model {name!r} is not served here; GET /v1/models lists {settings.model_name!r}",
                param="model",
                code="model_not_found",
            )

    async def respond(
        request: Request,
        body: SamplingFields,
        prompt: str | list[Any],
        chat: bool,
        tools: list[dict[str, Any]] | None = None,
    ) -> Response:
        job = Job(await prepare(body, prompt, chat, tools))
        names = None if tools is None else frozenset(t["function"]["name"] for t in tools)
        wants_logprobs = job.request.logprobs is not None
        reply = Reply.new(
            settings.model_name, chat, token_ids=body.return_token_ids, tools=names,
            logprobs=wants_logprobs, decode=engine.tokenizer.decode if wants_logprobs else None,
        )  # fmt: skip
        path = request.url.path
        if body.stream:
            loop = asyncio.get_running_loop()
            pieces: asyncio.Queue[Piece | None] = asyncio.Queue()
            sent = threading.Event()

            def on_step(piece: Piece) -> None:
                # Send each step before the next decode rather than during it: llama.cpp's
                # threads spin at barriers, so on a machine with as many cores as threads the
                # event loop's work, run while a decode runs, preempts one of them and stalls
                # the rest. The wait is bounded: a busy loop delays a step, never stops it.
                sent.clear()
                loop.call_soon_threadsafe(pieces.put_nowait, piece)
                sent.wait(HANDOFF_S)

            job.on_step = on_step
            future = submit(job, path)
            future.add_done_callback(lambda _: loop.call_soon_threadsafe(pieces.put_nowait, None))
            events = stream(job, future, pieces, sent, reply)
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
        return JSONResponse(reply.whole(completion) | {"engine_timings": timings(completion, job)})

    async def prepare(
        body: SamplingFields,
        prompt: str | list[Any],
        chat: bool,
        tools: list[dict[str, Any]] | None,
    ) -> GenerationRequest:
        """The engine's checked request, tokenized off the event loop (the tokenizer is shared
        with the worker's thread under one lock); a refusal is a 400 naming the field."""
        try:
            return await run_in_threadpool(
                engine.prepare, prompt, max_tokens=body.requested_tokens(),
                limit=settings.max_tokens, raw=True, tools=tools, sampling=body.sampling(),
                seed=body.seed, stop=body.stop_strings(), rule=body.rule,
                logprobs=body.requested_logprobs(),
            )  # fmt: skip
        except BadRequest as error:
            param = "messages" if chat and error.param == "prompt" else error.param
            raise APIError(400, str(error), param=param, code=error.code) from error

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
        pieces: asyncio.Queue[Piece | None],
        sent: threading.Event,
        reply: Reply,
    ) -> AsyncIterator[str]:
        """The stream's events; ``sent`` is set once each step's event went out (or had none)."""
        calls = ToolCallText(reply.tools) if reply.tools is not None else None
        first = True
        logprobs: list[TokenLogprob] = []  # of tokens whose text has not gone out yet
        try:
            while (piece := await pieces.get()) is not None:
                text = calls.add(piece.text) if calls is not None else piece.text
                logprobs += piece.logprobs or []
                if not text and not (reply.token_ids and piece.tokens):
                    sent.set()
                    continue
                if first:
                    metrics.first_token(job)
                yield json.dumps(reply.chunk(text, piece.tokens, first, logprobs=logprobs))
                first, logprobs = False, []
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
        made: list[ToolCall] = []
        if calls is not None:
            rest, made = calls.finish()
            if rest or made:
                yield json.dumps(reply.chunk(rest, [], first, made, logprobs))
                logprobs = []
        final = reply.last_chunk(completion, made, logprobs)
        yield json.dumps(final | {"engine_timings": timings(completion, job)})
        yield "[DONE]"

    return app


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
