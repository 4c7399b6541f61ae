"""The OpenAI-compatible HTTP API over one engine: the application, its error handlers, and the
routers of :mod:`~spec_decode.serving.routes` (``/v1/models``, ``/v1/chat/completions``,
``/v1/completions``, streamed as server-sent events or not; ``/health`` and ``/metrics``) and
llama-server's ``/infill`` (:mod:`~spec_decode.serving.infill`), each route handed the
:class:`~spec_decode.serving.state.Served` state through ``Depends``.

Every request body is read here, not by the framework, so that each way a body can be wrong gets
a 4xx with an OpenAI-style error (:class:`~spec_decode.serving.schemas.APIError`): over the size
limit (413), not UTF-8, nested too deeply (measured before parsing), not JSON, not an object or
not text (400), fields of the wrong type (strictly: ``true`` is not an integer) or out of range
(400), a wrong API key (401 with ``WWW-Authenticate: Bearer``), an unknown
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

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from spec_decode.serving.infill import router as infill
from spec_decode.serving.metrics import Metrics
from spec_decode.serving.routes import service, v1
from spec_decode.serving.schemas import APIError
from spec_decode.serving.state import Served, Settings
from spec_decode.serving.worker import Worker


def create_app(worker: Worker, settings: Settings) -> FastAPI:
    """The FastAPI application serving ``worker``'s engine."""
    app = FastAPI(title="spec-decode", docs_url=None, redoc_url=None, openapi_url=None)
    metrics = Metrics(worker)
    app.state.served = Served(worker, settings, metrics)
    app.include_router(service)
    app.include_router(v1)
    app.include_router(infill)

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

    return app
