"""The routes: ``/v1/models``, ``/v1/chat/completions`` and ``/v1/completions`` (behind the API
key; a completion with a ``suffix`` fills in the middle), ``/health`` and ``/metrics``; each
request read, checked, prepared on the engine and answered whole or streamed as server-sent
events. (``/infill``, llama-server's: :mod:`~spec_decode.serving.infill`.)"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from concurrent.futures import Future
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from spec_decode.backends.fim import encode_fim, fim_tokens
from spec_decode.core.errors import BadRequest
from spec_decode.serving.completion import Completion, Piece
from spec_decode.serving.logprobs import TokenLogprob
from spec_decode.serving.replies import Reply, timings
from spec_decode.serving.request import GenerationRequest
from spec_decode.serving.schemas import (
    APIError,
    ChatRequest,
    CompletionRequest,
    SamplingFields,
    parse,
)
from spec_decode.serving.state import Authorized, Served, State
from spec_decode.serving.tool_calls import ToolCall, ToolCallText
from spec_decode.serving.worker import Closed, Job, QueueFull

#: The longest the engine waits, after a streamed step, for the event loop to send it.
HANDOFF_S = 0.02
#: The refusal of fill-in-the-middle on a model without FIM tokens, and its code.
NO_FIM = (
    "{field} asks for fill-in-the-middle, and this model has no FIM tokens (such as "
    "<|fim_prefix|>, <|fim_suffix|> and <|fim_middle|>) in its vocabulary"
)
FIM_CODE = "fim_not_supported"

service = APIRouter()
v1 = APIRouter(prefix="/v1")


@service.get("/health")
async def health(state: State) -> dict[str, Any]:
    return {"status": "ok", "busy": state.worker.busy, "waiting": state.worker.waiting}


@service.get("/metrics")
async def prometheus(state: State) -> Response:
    return Response(state.metrics.exposition(), media_type=state.metrics.content_type)


@v1.get("/models")
async def models(state: Authorized) -> dict[str, Any]:
    card = {"id": state.settings.model_name, "object": "model", "created": state.created}
    return {"object": "list", "data": [card | {"owned_by": "spec-decode"}]}


@v1.post("/chat/completions")
async def chat(request: Request, state: Authorized) -> Response:
    body = parse(ChatRequest, await read_json(request, state.settings.max_body))
    check_model(state, body.model)
    messages = [m.as_template_input() for m in body.messages]
    return await respond(request, state, body, messages, body.tool_definitions())


@v1.post("/completions")
async def completions(request: Request, state: Authorized) -> Response:
    body = parse(CompletionRequest, await read_json(request, state.settings.max_body))
    check_model(state, body.model)
    text = body.prompt_text()
    prompt = list(body.prompt) if text is None else text
    if body.suffix is not None:
        prompt = await fill_in_the_middle(state, prompt, body.suffix)
    return await respond(request, state, body, prompt)


async def fill_in_the_middle(
    state: Served, prompt: str | list[Any], suffix: str
) -> str | list[Any]:
    """The FIM prompt's token ids for the text before and after the gap (tokenized off the
    event loop); an empty ``suffix`` on a model without FIM tokens leaves the prompt a plain
    one, any other is a 400 naming ``suffix``."""
    tokenizer = state.engine.tokenizer
    tokens = await run_in_threadpool(fim_tokens, tokenizer)
    if tokens is None and not suffix:
        return prompt
    if tokens is None:
        raise APIError(400, NO_FIM.format(field="suffix"), param="suffix", code=FIM_CODE)
    return await run_in_threadpool(encode_fim, tokenizer, tokens, prompt, suffix)


def check_model(state: Served, name: str) -> None:
    served_name = state.settings.model_name
    if name != served_name:
        raise APIError(
            404,
            f"model {name!r} is not served here; GET /v1/models lists {served_name!r}",
            param="model",
            code="model_not_found",
        )


async def respond(
    request: Request,
    state: Served,
    body: SamplingFields,
    prompt: str | list[Any],
    tools: list[dict[str, Any]] | None = None,
) -> Response:
    """Run one request on the worker and answer it, whole or streamed."""
    chat = isinstance(body, ChatRequest)
    job = Job(await prepare(state, body, prompt, tools))
    names = None if tools is None else frozenset(t["function"]["name"] for t in tools)
    wants_logprobs = job.request.options.logprobs is not None
    reply = Reply.new(
        state.settings.model_name, chat, token_ids=body.return_token_ids, tools=names,
        logprobs=wants_logprobs, decode=state.engine.tokenizer.decode if wants_logprobs else None,
        one_call=getattr(body, "parallel_tool_calls", None) is False,
    )  # fmt: skip
    path = request.url.path
    if body.stream:
        handoff = Handoff(asyncio.get_running_loop())
        job.on_step = handoff.put
        future = submit(state, job, path)
        future.add_done_callback(lambda _: handoff.close())
        events = stream(state, job, future, handoff, reply)
        return EventSourceResponse(events, ping=15, shutdown_grace_period=state.settings.grace_s)
    future = submit(state, job, path)
    try:
        completion = await asyncio.wrap_future(future)
    except asyncio.CancelledError as error:
        if future.cancelled() and state.worker.closed:  # dropped from the queue at shutdown
            raise APIError(503, "the server is shutting down", kind="server_error") from error
        job.cancel.set()
        future.cancel()
        raise
    return JSONResponse(reply.whole(completion) | {"engine_timings": timings(completion, job)})


async def prepare(
    state: Served,
    body: SamplingFields,
    prompt: str | list[Any],
    tools: list[dict[str, Any]] | None,
) -> GenerationRequest:
    """The engine's checked request, tokenized off the event loop (the tokenizer is shared
    with the worker's thread under one lock); a refusal is a 400 naming the field."""
    try:
        return await run_in_threadpool(
            state.engine.prepare, prompt, body.options(), max_tokens=body.requested_tokens(),
            limit=state.settings.max_tokens, raw=True, tools=tools,
        )  # fmt: skip
    except BadRequest as error:
        chat = isinstance(body, ChatRequest)
        param = "messages" if chat and error.param == "prompt" else error.param
        raise APIError(400, str(error), param=param, code=error.code) from error


def submit(state: Served, job: Job, path: str) -> Future[Completion]:
    """Queue ``job`` on the worker (429 when the queue is full, 503 at shutdown)."""
    try:
        future = state.worker.submit(job)
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
    future.add_done_callback(lambda done: state.metrics.finished(path, done))
    return future


class Handoff:
    """A generation's pieces, from the engine's thread to the event loop.

    Each step is sent before the next decode rather than during it: llama.cpp's threads spin at
    barriers, so on a machine with as many cores as threads the event loop's work, run while a
    decode runs, preempts one of them and stalls the rest. So :meth:`put` waits until the
    stream has sent the piece (:meth:`sent`), at most :data:`HANDOFF_S`: a busy loop delays a
    step, never stops it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: asyncio.Queue[Piece | None] = asyncio.Queue()
        self._sent = threading.Event()

    def put(self, piece: Piece) -> None:
        """(The engine's thread.) Hand one piece over and wait for it to go out."""
        self._sent.clear()
        self._loop.call_soon_threadsafe(self._queue.put_nowait, piece)
        self._sent.wait(HANDOFF_S)

    def close(self) -> None:
        """(Any thread.) The generation ended: :meth:`get` returns None after the last piece."""
        self._loop.call_soon_threadsafe(self._queue.put_nowait, None)

    async def get(self) -> Piece | None:
        return await self._queue.get()

    def sent(self) -> None:
        """The last piece went out (or had nothing to send): the engine may go on."""
        self._sent.set()


async def stream(
    state: Served, job: Job, future: Future[Completion], handoff: Handoff, reply: Reply
) -> AsyncIterator[str]:
    """The stream's events, one per piece with something to send, then the last one."""
    calls = ToolCallText(reply.tools) if reply.tools is not None else None
    first = True
    logprobs: list[TokenLogprob] = []  # of tokens whose text has not gone out yet
    try:
        while (piece := await handoff.get()) is not None:
            text = calls.add(piece.text) if calls is not None else piece.text
            logprobs += piece.logprobs or []
            if not text and not (reply.token_ids and piece.tokens):
                handoff.sent()
                continue
            if first:
                state.metrics.first_token(job)
            yield json.dumps(reply.chunk(text, piece.tokens, first, logprobs=logprobs))
            first, logprobs = False, []
            handoff.sent()  # the response resumes this generator once the event was sent
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
        handoff.sent()
        future.cancel()
        raise
    made: list[ToolCall] = []
    if calls is not None:
        rest, made = calls.finish()
        made = reply.kept(made)
        if rest or made:
            yield json.dumps(reply.chunk(rest, [], first, made, logprobs))
            logprobs = []
    final = reply.last_chunk(completion, made, logprobs)
    yield json.dumps(final | {"engine_timings": timings(completion, job)})
    yield "[DONE]"


async def read_json(request: Request, limit: int) -> Any:
    """The request body as JSON: at most ``limit`` bytes, UTF-8, nested at most
    :data:`MAX_DEPTH` deep (measured before parsing), parsed, an object, and text throughout
    (4xx otherwise)."""
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
    if (depth := nesting_depth(bytes(data))) > MAX_DEPTH:
        raise APIError(
            400,
            f"the request body nests arrays and objects {depth} deep; at most {MAX_DEPTH} is "
            "accepted",
            code="too_deeply_nested",
        )
    try:
        body = json.loads(text)
    except RecursionError as error:  # not reached under MAX_DEPTH: a second line of defence
        raise APIError(
            400, "the request body is nested too deeply", code="too_deeply_nested"
        ) from error
    except ValueError as error:  # JSONDecodeError, and an integer of over 4300 digits
        raise APIError(400, f"the request body is not JSON: {error}") from error
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    try:  # a \ud800 escape parses to a lone surrogate, which no later step could encode
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as error:
        raise APIError(
            400, "the request body escapes a lone UTF-16 surrogate: it is not text"
        ) from error
    return body


#: The deepest a request body may nest arrays and objects: far beyond any request (a tool's
#: parameters a dozen levels deep nest about 30), far below what parsing, validating and
#: compiling a grammar recurse through safely (Python stops at about 1000 frames).
MAX_DEPTH = 64


def nesting_depth(data: bytes) -> int:
    """How deep ``data`` (JSON text) nests arrays and objects, brackets inside strings not
    counted, in linear time and a few bytes of memory per byte, whatever the depth (a body
    nested 100,000 deep costs a millisecond, not a RecursionError). Escapes go first: each run
    of backslashes pairs up from its left, as JSON reads it, and a backslash left over escapes
    what follows it; a quote is then a string's start or end, so a bracket lies outside every
    string when an even number of quotes precede it."""
    unescaped = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    text = np.frombuffer(unescaped, np.uint8)
    outside = (np.cumsum(text == ord('"'), dtype=np.int32) & 1) == 0
    opening = outside & ((text == ord("[")) | (text == ord("{")))
    closing = outside & ((text == ord("]")) | (text == ord("}")))
    depths = np.cumsum(opening.astype(np.int32) - closing.astype(np.int32))
    return int(depths.max(initial=0))
