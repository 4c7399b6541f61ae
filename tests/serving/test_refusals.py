"""Every way a request can be wrong gets an OpenAI-style 4xx naming the field, checked in
process (the app over ASGI, the tiny GGUF engine on its worker thread): no subprocess needed to
see what a body is answered with."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("sse_starlette")
pytest.importorskip("prometheus_client")

from bad_requests import CALL, CASES, CHAT, LIMIT, MODEL, TEXT, TOO_DEEP, TOOL, USER  # noqa: E402
from conftest import running  # noqa: E402

from spec_decode.core.errors import BadRequest  # noqa: E402
from spec_decode.serving.config import EngineConfig  # noqa: E402
from spec_decode.serving.fields import (  # noqa: E402
    CHAT_NOT_YET,
    COMPLETION_NOT_YET,
    NO_EFFECT,
    OPENAI_CHAT_FIELDS,
    OPENAI_COMPLETION_FIELDS,
)
from spec_decode.serving.routes import MAX_DEPTH, nesting_depth  # noqa: E402
from spec_decode.serving.schemas import ChatRequest, CompletionRequest, parse  # noqa: E402
from spec_decode.serving.server import create_app  # noqa: E402
from spec_decode.serving.state import Settings  # noqa: E402
from spec_decode.serving.worker import Worker  # noqa: E402


@pytest.fixture(scope="module")
def worker(tiny_pair):
    target, draft = tiny_pair
    with running(EngineConfig(target=str(target), draft=str(draft), threads=1), 4) as worker:
        yield worker


@pytest.fixture(scope="module")
def app(worker):
    return create_app(worker, Settings(MODEL, max_tokens=LIMIT))


def post(app, path: str, body: dict | bytes) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()

    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post(path, content=content)

    return asyncio.run(send())


PATHS = {"chat": "/v1/chat/completions", "text": "/v1/completions"}


@pytest.mark.parametrize("name", CASES)
def test_a_bad_request_is_a_4xx_naming_the_field(app, worker, name, caplog, monkeypatch):
    """Refused before it reaches the engine, which is what answers it at once: a request the
    worker were handed would fail here (rather than a wall-clock limit, which a loaded machine
    breaks). (An exception the app did not turn into a 4xx would be raised here by the
    transport, as the server would log its traceback.)"""
    path, body, status, param, code = CASES[name]

    def reached(job):
        raise AssertionError(f"{name}: handed to the engine before it was refused")

    monkeypatch.setattr(worker, "submit", reached)
    response = post(app, PATHS[path], body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"] and error["type"] == "invalid_request_error"
    assert (error["param"], error["code"]) == (param, code)
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


def nested(depth: int) -> dict:
    """A ``metadata`` value (accepted and not used) that makes the body ``depth`` deep."""
    value: dict = {}
    for _ in range(depth - 2):
        value = {"a": value}
    return value


def test_nesting_up_to_the_limit_is_served_and_one_more_is_refused(app):
    body = {**TEXT, "max_tokens": 1, "temperature": 0}
    served = post(app, PATHS["text"], {**body, "metadata": nested(MAX_DEPTH)})
    assert served.status_code == 200, served.text
    refused = post(app, PATHS["text"], {**body, "metadata": nested(MAX_DEPTH + 1)})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == TOO_DEEP
    assert f"{MAX_DEPTH + 1} deep" in refused.json()["error"]["message"]


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        (b"", 0),
        (b'{"a": 1}', 1),
        (b'{"a": [1, {"b": []}]}', 4),
        (b'{"a": "[[{{"}', 1),  # brackets in a string do not count
        (b'{"a": "\\"[[", "b": []}', 2),  # nor after an escaped quote
        (b'{"a": "\\\\", "b": [[]]}', 3),  # an escaped backslash escapes no quote
        (b"[" * 100_000, 100_000),
    ],
)
def test_nesting_depth_is_measured_outside_strings(text, depth):
    assert nesting_depth(text) == depth


def test_measuring_the_depth_is_linear_on_bodies_made_to_be_slow():
    for text in (b'"' + b'\\"' * 500_000, b"[" * (1 << 20), b'"[' * 500_000):
        start = time.perf_counter()
        nesting_depth(text)
        assert time.perf_counter() - start < 1


def test_numbers_may_be_integers(app):
    """Floats take integers, as in the OpenAI API."""
    body = {**CHAT, "max_tokens": 2, "temperature": 2, "top_p": 1, "presence_penalty": 0}
    served = post(app, PATHS["chat"], {**body, "seed": 3, "logit_bias": {"5": 1}})
    assert served.status_code == 200, served.text


def test_an_assistant_message_that_made_calls_needs_no_content():
    """(Checked on the schema: the tiny model's letters-only vocabulary cannot tokenize a call.)"""
    messages = [
        *USER,
        {"role": "assistant", "tool_calls": [CALL]},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    request = parse(ChatRequest, {**CHAT, "messages": messages, "tools": [TOOL]})
    assert [m.content for m in request.messages] == ["hi", None, None, "ok"]


def test_ignore_eos_goes_with_tools_the_model_may_call():
    """Under tool_choice auto the output stays free text, with no grammar to end it; a required
    call has one, and is refused beside ignore_eos (the refusal table)."""
    body = {**CHAT, "tools": [TOOL], "ignore_eos": True}
    assert parse(ChatRequest, body).options().ignore_eos
    with pytest.raises(BadRequest, match="ignore_eos"):
        parse(ChatRequest, {**body, "tool_choice": "required"}).options()


#: Fields that change nothing, or are sent at the value that means "off": served as without them.
HARMLESS = {
    "user": "me", "metadata": {"a": "b"}, "store": False, "service_tier": "auto",
    "stream_options": {"include_usage": True}, "parallel_tool_calls": True, "tools": [],
    "tool_choice": "none", "response_format": {"type": "text"}, "logprobs": False,
    "top_logprobs": 0,
    "frequency_penalty": 0.0, "presence_penalty": 0, "logit_bias": {},
}  # fmt: skip


def test_fields_that_change_nothing_are_accepted(app):
    body = {**CHAT, "max_tokens": 3, "temperature": 0}
    plain = post(app, PATHS["chat"], body).json()["choices"]
    with_all = post(app, PATHS["chat"], {**body, **HARMLESS})
    assert with_all.status_code == 200, with_all.text
    assert with_all.json()["choices"] == plain


def test_a_good_request_next_to_them_is_served(app):
    response = post(app, PATHS["text"], {**TEXT, "max_tokens": 3, "temperature": 0})
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize(
    ("model", "fields", "not_yet"),
    [
        ("chat", OPENAI_CHAT_FIELDS, CHAT_NOT_YET),
        ("text", OPENAI_COMPLETION_FIELDS, COMPLETION_NOT_YET),
    ],
)
def test_every_field_of_the_openai_api_is_implemented_harmless_or_refused(model, fields, not_yet):
    schema = ChatRequest if model == "chat" else CompletionRequest
    unplaced = {
        name
        for name in fields
        if name not in schema.model_fields and name not in NO_EFFECT and name not in not_yet
    }
    assert unplaced == set()
    assert not set(schema.model_fields) & (NO_EFFECT | set(not_yet))


@pytest.mark.parametrize("name", sorted(CHAT_NOT_YET))
def test_a_field_not_implemented_yet_is_refused_at_any_other_value(app, name):
    response = post(app, PATHS["chat"], {**CHAT, name: {"on": True}})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == name


@pytest.fixture(scope="module")
def secured():
    """An app with an API key (on an engine that is never asked to run: the key is checked
    first)."""
    worker = Worker(object, max_queue=0)
    yield create_app(worker, Settings(MODEL, api_key="s3cret"))
    worker.close(0)
    worker.join()


def get_models(app, authorization: str | None) -> httpx.Response:
    headers = {} if authorization is None else {"Authorization": authorization}

    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.get("/v1/models", headers=headers)

    return asyncio.run(send())


@pytest.mark.parametrize("given", ["Bearer s3cret", "bearer s3cret", "BEARER  s3cret"])
def test_the_authorization_scheme_is_case_insensitive(secured, given):
    """RFC 7235: the scheme is a case-insensitive token, followed by one or more spaces."""
    response = get_models(secured, given)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    "given", [None, "", "Bearer", "Bearer wrong", "Basic s3cret", "s3cret", "Bearers3cret"]
)
def test_a_401_asks_for_a_bearer_token(secured, given):
    response = get_models(secured, given)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json()["error"]["type"] == "authentication_error"
