"""llama-server's ``POST /infill``, as llama.vim and llama.vscode call it (behind the API key).

The code before and after the cursor (``input_prefix``, ``input_suffix``), context from other
files (``input_extra``: ``{"filename", "text"}`` chunks) and ``prompt`` (text after the prefix)
make one prompt in the model's own FIM tokens (:func:`~spec_decode.backends.fim.encode_infill`,
llama-server's layout and budget), decoded like any other: speculation drafts from it, suffix
and extra context included, and the output is target-only decoding's. A model without FIM
tokens is a 400 naming ``input_suffix``.

The fields are the editors': those of :class:`InfillRequest`, the sampling fields the server's
other routes take, and ``n_predict`` (-1: no limit of its own; 0: nothing generated, the prompt
read into a slot's cache, as editors ask to warm it with the context of later requests).
``n_indent`` and ``t_max_predict_ms`` end the text as llama-server does
(:class:`~spec_decode.serving.infill_reply.Limits`). ``samplers`` is accepted when it names
llama.cpp's samplers, and changes nothing: the sampler is this server's (temperature, top-k,
top-p, min-p, from their fields), which ``generation_settings.samplers`` reports; llama.cpp's
``infill`` sampler is not applied. ``cache_prompt``, ``t_max_prompt_ms`` (which llama-server
does not use either) and ``id_slot`` cannot change the answer: accepted, not used.

The answer has llama-server's shape (:class:`~spec_decode.serving.infill_reply.InfillReply`),
whole or streamed as server-sent events, with no ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from concurrent.futures import Future
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from spec_decode.backends.fim import encode_infill, fim_tokens
from spec_decode.serving.completion import Completion
from spec_decode.serving.infill_reply import InfillReply, Limits
from spec_decode.serving.request import RequestOptions
from spec_decode.serving.routes import (
    FIM_CODE,
    NO_FIM,
    Handoff,
    check_model,
    prepare,
    read_json,
    submit,
)
from spec_decode.serving.schemas import APIError, SamplingFields, parse
from spec_decode.serving.state import Authorized, Served
from spec_decode.serving.worker import Job

#: llama.cpp's sampler names, which ``samplers`` may list.
SAMPLERS = frozenset(
    {
        "penalties", "dry", "top_n_sigma", "top_k", "typ_p", "typical_p", "top_p", "min_p",
        "xtc", "temperature", "infill",
    }
)  # fmt: skip

router = APIRouter()


class ExtraChunk(BaseModel):
    """One chunk of ``input_extra``: a file's name and a piece of its text."""

    model_config = ConfigDict(extra="forbid")

    text: str
    filename: str = "tmp"  # llama-server's default
    #: When llama.vim picked the chunk: not used.
    time: Any = None


class InfillRequest(SamplingFields):
    """``POST /infill``: llama-server's fields that llama.vim and llama.vscode send."""

    model: str | None = None  # type: ignore[assignment]  # optional here, as in llama-server
    input_prefix: str
    input_suffix: str
    input_extra: list[ExtraChunk] = Field(default_factory=list)
    prompt: str = ""
    #: The token limit (before ``max_tokens``): -1 none of its own, 0 nothing generated.
    n_predict: int | None = Field(default=None, ge=-1)
    n_indent: int = Field(default=0, ge=0)
    t_max_predict_ms: int = Field(default=0, ge=0)
    samplers: list[str] | None = None
    #: Only these fields of the answer, by their paths (``timings/prompt_n``).
    response_fields: list[str] | None = None
    return_tokens: bool = False
    # accepted, not used (see the module's docstring)
    cache_prompt: bool = True
    t_max_prompt_ms: int | None = None
    id_slot: int = -1

    @field_validator("samplers")
    @classmethod
    def _known_samplers(cls, value: list[str] | None) -> list[str] | None:
        unknown = [name for name in value or [] if name not in SAMPLERS]
        if unknown:
            raise ValueError(f"unknown sampler(s) {', '.join(map(repr, unknown))}")
        return value

    @field_validator("seed")
    @classmethod
    def _random_seed(cls, value: int | None) -> int | None:
        return None if value == -1 else value  # llama-server's -1: a fresh seed

    def wants_tokens(self) -> bool:
        """Whether the answer lists its token ids (llama-server's field, or vLLM's)."""
        return self.return_tokens or self.return_token_ids

    def requested_tokens(self) -> int | None:
        if self.n_predict is not None and self.n_predict != -1:
            return self.n_predict
        return self.max_tokens


@router.post("/infill")
async def infill(request: Request, state: Authorized) -> Response:
    body = parse(InfillRequest, await read_json(request, state.settings.max_body))
    if body.model is not None:
        check_model(state, body.model)
    ids, cut = await infill_ids(state, body)
    reply = InfillReply(state.settings.model_name, body, len(ids), cut)
    if body.n_predict == 0:  # llama-server reads the prompt (its cache warms) and writes nothing
        await read_prompt(state, ids, request.url.path)
        return answer(body.stream, reply.nothing())
    job = Job(await prepare(state, body, ids, None))
    limits = Limits(body.n_indent, body.t_max_predict_ms, job.cancel, state.engine.tokenizer.decode)
    path = request.url.path
    if body.stream:
        handoff = Handoff(asyncio.get_running_loop())
        job.on_step = lambda piece: handoff.put(limits.take(piece))
        future = submit(state, job, path)
        future.add_done_callback(lambda _: handoff.close())
        events = stream(state, job, future, handoff, reply, limits)
        return EventSourceResponse(events, ping=15, shutdown_grace_period=state.settings.grace_s)
    job.on_step = limits.take
    future = submit(state, job, path)
    try:
        completion = await asyncio.wrap_future(future)
    except asyncio.CancelledError as error:
        if future.cancelled() and state.worker.closed:  # dropped from the queue at shutdown
            raise APIError(503, "the server is shutting down", kind="server_error") from error
        job.cancel.set()
        future.cancel()
        raise
    return JSONResponse(reply.whole(completion, limits, job))


async def infill_ids(state: Served, body: InfillRequest) -> tuple[list[int], bool]:
    """The prompt's token ids (tokenized off the event loop), and whether a part was cut to
    fit; a 400 naming ``input_suffix`` for a model without FIM tokens."""
    engine = state.engine
    tokens = await run_in_threadpool(fim_tokens, engine.tokenizer)
    if tokens is None:
        message = NO_FIM.format(field="/infill")
        raise APIError(400, message, param="input_suffix", code=FIM_CODE)
    extra = [(chunk.filename, chunk.text) for chunk in body.input_extra]
    room = body.requested_tokens() or state.settings.max_tokens
    return await run_in_threadpool(
        encode_infill, engine.tokenizer, tokens, body.input_prefix, body.input_suffix, extra,
        body.prompt, context=engine.context_window, max_tokens=room,
    )  # fmt: skip


async def read_prompt(state: Served, ids: list[int], path: str) -> None:
    """Read ``ids`` into a slot's KV cache, as a one-token target-only generation whose token
    is dropped (its pass is the prompt's own), queued like any request."""
    options = RequestOptions(target_only=True)
    warm = await run_in_threadpool(state.engine.prepare, ids, options, max_tokens=1, raw=True)
    await asyncio.wrap_future(submit(state, Job(warm), path))


def answer(streamed: bool, whole: dict[str, Any]) -> Response:
    """An answer with nothing generated: as JSON, or a stream of its one last event."""
    if not streamed:
        return JSONResponse(whole)

    async def events() -> AsyncIterator[str]:
        yield json.dumps(whole)

    return EventSourceResponse(events())


async def stream(
    state: Served,
    job: Job,
    future: Future[Completion],
    handoff: Handoff,
    reply: InfillReply,
    limits: Limits,
) -> AsyncIterator[str]:
    """The stream's events: one per piece with text, then the whole answer's fields."""
    first, predicted = True, 0
    try:
        while (piece := await handoff.get()) is not None:
            predicted += len(piece.tokens)
            if not piece.text and not (reply.body.wants_tokens() and piece.tokens):
                handoff.sent()
                continue
            if first:
                state.metrics.first_token(job)
                first = False
            yield json.dumps(reply.chunk(piece.text, piece.tokens, predicted))
            handoff.sent()  # the response resumes this generator once the event was sent
        if (failure := failed(future)) is not None:  # the status line went out already
            yield json.dumps(failure.body())
            return
        completion = future.result()
    except BaseException:  # the client went away (or the server is stopping): cancel
        job.cancel.set()
        handoff.sent()
        future.cancel()
        raise
    yield json.dumps(reply.whole(completion, limits, job, streamed=True))


def failed(future: Future[Completion]) -> APIError | None:
    """Why a finished generation has no completion, or None when it has one."""
    if future.cancelled():  # dropped from the queue at shutdown
        return APIError(503, "the server is shutting down", kind="server_error")
    if (problem := future.exception()) is not None:
        return APIError(500, f"internal error: {type(problem).__name__}", "server_error")
    return None
