"""What every route of the server works with, and the dependencies that hand it over: the
settings the server was started with, the worker (and through it the engine), the metrics; and
the API key check every ``/v1`` route depends on."""

from __future__ import annotations

import hmac
import time
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request

from spec_decode.serving.engine import Engine
from spec_decode.serving.metrics import Metrics
from spec_decode.serving.schemas import APIError
from spec_decode.serving.worker import Worker

#: The largest request body accepted, in bytes.
MAX_BODY = 1 << 20


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


@dataclass(frozen=True)
class Served:
    """The worker, the settings and the metrics of one server, and when it started."""

    worker: Worker
    settings: Settings
    metrics: Metrics
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def engine(self) -> Engine:
        return self.worker.engine


def served(request: Request) -> Served:
    """The application's :class:`Served` (a route dependency)."""
    return request.app.state.served


def authorized(request: Request, state: Annotated[Served, Depends(served)]) -> Served:
    """:func:`served`, once the request carries the API key (when the server has one): a 401
    with ``WWW-Authenticate: Bearer`` otherwise. The scheme's name is case-insensitive
    (RFC 7235: ``bearer KEY`` is ``Bearer KEY``); the key is compared in constant time."""
    key = state.settings.api_key
    if key is not None:
        scheme, _, given = request.headers.get("authorization", "").strip().partition(" ")
        right = scheme.lower() == "bearer"
        if not hmac.compare_digest(given.strip().encode(), key.encode()) or not right:
            raise APIError(
                401,
                "missing or wrong API key (send Authorization: Bearer KEY)",
                kind="authentication_error",
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )
    return state


#: A route parameter: the server's state.
State = Annotated[Served, Depends(served)]
#: A route parameter: the server's state, once the API key was checked.
Authorized = Annotated[Served, Depends(authorized)]
