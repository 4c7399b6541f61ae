"""Every way a request can be wrong gets an OpenAI-style 4xx naming the field, checked in
process (the app over ASGI, the tiny GGUF engine on its worker thread): no subprocess needed to
see what a body is answered with."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("sse_starlette")
pytest.importorskip("prometheus_client")

from spec_decode.serving.config import EngineConfig  # noqa: E402
from spec_decode.serving.engine import Engine  # noqa: E402
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

MODEL = "target"
LIMIT = 64  # the server's --max-tokens
USER = [{"role": "user", "content": "hi"}]
CHAT = {"model": MODEL, "messages": USER}
TEXT = {"model": MODEL, "prompt": "abc"}
LONG = "ab" * 250  # 500 letters: past the tiny model's 512 positions with 60 new tokens
TOO_LONG = "context_length_exceeded"
NOT_YET, UNKNOWN = "unsupported_field", "unknown_field"
TOOL = {"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}
CALL = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
NAN = json.dumps({**CHAT, "temperature": math.nan}).encode()
HUGE = b'{"model": "' + b"x" * (2 << 20) + b'"}'
DEEP = b'{"model": "target", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
BIG_INT = b'{"model": "target", "prompt": "ab", "seed": ' + b"9" * 5000 + b"}"
LONE_SURROGATE = b'{"model": "target", "prompt": "ab\\ud800"}'
TOO_DEEP, STRICT = "too_deeply_nested", None


@pytest.fixture(scope="module")
def app(tiny_pair):
    target, draft = tiny_pair
    config = EngineConfig(target=str(target), draft=str(draft), threads=1)
    worker = Worker(lambda: Engine.load(config), max_queue=4)
    yield create_app(worker, Settings(MODEL, max_tokens=LIMIT))
    worker.close(0)
    worker.join()


def post(app, path: str, body: dict | bytes) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()

    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post(path, content=content)

    return asyncio.run(send())


#: name: (path, body, status, the error's param, its code)
CASES = {
    "malformed JSON": ("chat", b'{"model": ', 400, None, None),
    "JSON nested 100,000 deep": ("chat", DEEP, 400, None, TOO_DEEP),
    "an integer of 5000 digits": ("text", BIG_INT, 400, None, None),
    "a lone surrogate": ("text", LONE_SURROGATE, 400, None, None),
    "not an object": ("chat", b"[1, 2]", 400, None, None),
    "invalid UTF-8": ("chat", b'{"model": "target", "messages": "\xff\xfe"}', 400, None, None),
    "a body too large": ("chat", HUGE, 413, None, "body_too_large"),
    "unknown model": ("chat", {**CHAT, "model": "gpt-9"}, 404, "model", "model_not_found"),
    "no messages": ("chat", {**CHAT, "messages": []}, 400, "messages", None),
    "unknown role": (
        "chat",
        {**CHAT, "messages": [{"role": "wizard"}]},
        400,
        "messages.0.role",
        None,
    ),
    "negative temperature": ("chat", {**CHAT, "temperature": -0.5}, 400, "temperature", None),
    "NaN temperature": ("chat", NAN, 400, "temperature", None),
    "top_p of 0": ("chat", {**CHAT, "top_p": 0}, 400, "top_p", None),
    "top_p above 1": ("chat", {**CHAT, "top_p": 1.5}, 400, "top_p", None),
    "min_p above 1": ("chat", {**CHAT, "min_p": 2}, 400, "min_p", None),
    "top_k of -3": ("chat", {**CHAT, "top_k": -3}, 400, "top_k", None),
    "n of 2": ("chat", {**CHAT, "n": 2}, 400, "n", None),
    "max_tokens of 0": ("chat", {**CHAT, "max_tokens": 0}, 400, "max_tokens", None),
    "max_tokens above the limit": (
        "chat",
        {**CHAT, "max_tokens": LIMIT + 1},
        400,
        "max_tokens",
        None,
    ),
    "beyond the context": (
        "text",
        {**TEXT, "prompt": LONG, "max_tokens": 60},
        400,
        "prompt",
        TOO_LONG,
    ),
    "a chat beyond the context": (
        "chat",
        {**CHAT, "messages": [{"role": "user", "content": LONG}], "max_tokens": 60},
        400,
        "messages",
        TOO_LONG,
    ),
    "an empty text prompt": ("text", {**TEXT, "prompt": ""}, 400, "prompt", None),
    "an empty id prompt": ("text", {**TEXT, "prompt": []}, 400, "prompt", None),
    "an id outside the vocabulary": ("text", {**TEXT, "prompt": [4, 10_000]}, 400, "prompt", None),
    "two prompts": ("text", {**TEXT, "prompt": ["ab", "cd"]}, 400, "prompt", None),
    "an empty stop string": ("text", {**TEXT, "stop": [""]}, 400, "stop", None),
    "an unknown rule": ("text", {**TEXT, "rule": "typical"}, 400, "rule", None),
    "a penalty above 2": ("chat", {**CHAT, "presence_penalty": 2.5}, 400, "presence_penalty", None),
    "a bias above 100": ("text", {**TEXT, "logit_bias": {"5": 101}}, 400, "logit_bias", None),
    "a bias on a word": ("text", {**TEXT, "logit_bias": {"a": 1}}, 400, "logit_bias", None),
    "a bias on a superscript": ("text", {**TEXT, "logit_bias": {"²": 1}}, 400, "logit_bias", None),
    "a bias on a 40-digit id": (
        "text",
        {**TEXT, "logit_bias": {"9" * 40: 1}},
        400,
        "logit_bias",
        None,
    ),
    "a bias outside the vocabulary": (
        "text",
        {**TEXT, "logit_bias": {"10000": 1}},
        400,
        "logit_bias",
        None,
    ),
    "tool_choice required without tools": (
        "chat",
        {**CHAT, "tool_choice": "required"},
        400,
        "tool_choice",
        None,
    ),
    "tool_choice naming no given tool": (
        "chat",
        {**CHAT, "tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "x"}}},
        400,
        "tool_choice",
        None,
    ),
    "a tool without a type": (
        "chat",
        {**CHAT, "tools": [TOOL["function"]]},
        400,
        "tools.0.type",
        None,
    ),
    "tool_calls on a user message": (
        "chat",
        {**CHAT, "messages": [{**USER[0], "tool_calls": [CALL]}]},
        400,
        "messages.0",
        None,
    ),
    "an unknown response format": (
        "chat",
        {**CHAT, "response_format": {"type": "yaml"}},
        400,
        "response_format.type",
        None,
    ),
    "a json_schema format without its schema": (
        "chat",
        {**CHAT, "response_format": {"type": "json_schema"}},
        400,
        "response_format",
        None,
    ),
    "a schema that does not compile": (
        "chat",
        {
            **CHAT,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "nosuch"}},
            },
        },
        400,
        "response_format",
        None,
    ),
    "top_logprobs above 20": (
        "chat",
        {**CHAT, "logprobs": True, "top_logprobs": 21},
        400,
        "top_logprobs",
        None,
    ),
    "top_logprobs without logprobs": (
        "chat",
        {**CHAT, "top_logprobs": 2},
        400,
        "top_logprobs",
        None,
    ),
    "logprobs above 20": ("text", {**TEXT, "logprobs": 21}, 400, "logprobs", None),
    "echo": ("text", {**TEXT, "echo": True}, 400, "echo", NOT_YET),
    "a chat field in a text completion": ("text", {**TEXT, "tools": []}, 400, "tools", UNKNOWN),
    "an unknown field": (
        "chat",
        {**CHAT, "repetition_penalty": 1.1},
        400,
        "repetition_penalty",
        UNKNOWN,
    ),
    # types are strict, as in the OpenAI API: no boolean, string or fraction for a number
    "max_tokens true": ("chat", {**CHAT, "max_tokens": True}, 400, "max_tokens", STRICT),
    "max_tokens as a string": ("chat", {**CHAT, "max_tokens": "16"}, 400, "max_tokens", STRICT),
    "max_tokens with a fraction": ("text", {**TEXT, "max_tokens": 2.5}, 400, "max_tokens", STRICT),
    "max_completion_tokens true": (
        "chat",
        {**CHAT, "max_completion_tokens": True},
        400,
        "max_completion_tokens",
        STRICT,
    ),
    "temperature as a string": ("chat", {**CHAT, "temperature": "1"}, 400, "temperature", STRICT),
    "temperature true": ("text", {**TEXT, "temperature": True}, 400, "temperature", STRICT),
    "temperature 1e308": ("chat", {**CHAT, "temperature": 1e308}, 400, "temperature", None),
    "temperature above 2": ("chat", {**CHAT, "temperature": 2.5}, 400, "temperature", None),
    "top_p true": ("chat", {**CHAT, "top_p": True}, 400, "top_p", STRICT),
    "a penalty below -2": (
        "text",
        {**TEXT, "frequency_penalty": -3},
        400,
        "frequency_penalty",
        None,
    ),
    "n true": ("chat", {**CHAT, "n": True}, 400, "n", STRICT),
    "n of 0": ("chat", {**CHAT, "n": 0}, 400, "n", None),
    "a seed with a fraction": ("text", {**TEXT, "seed": 1.5}, 400, "seed", STRICT),
    "stream 1": ("chat", {**CHAT, "stream": 1}, 400, "stream", STRICT),
    "logprobs as a string": ("chat", {**CHAT, "logprobs": "true"}, 400, "logprobs", STRICT),
    "logprobs true in a text completion": (
        "text",
        {**TEXT, "logprobs": True},
        400,
        "logprobs",
        None,
    ),
    "a bias of true": ("text", {**TEXT, "logit_bias": {"5": True}}, 400, "logit_bias.5", None),
    "a stop number": ("text", {**TEXT, "stop": [5]}, 400, "stop.0", None),
    "a model number": ("chat", {**CHAT, "model": 5}, 400, "model", None),
    "a prompt of booleans": ("text", {**TEXT, "prompt": [True]}, 400, "prompt.0", None),
    "a user message without content": (
        "chat",
        {**CHAT, "messages": [{"role": "user"}]},
        400,
        "messages.0.content",
        None,
    ),
    "a system message with null content": (
        "chat",
        {**CHAT, "messages": [{"role": "system", "content": None}, *USER]},
        400,
        "messages.0.content",
        None,
    ),
    "an assistant message with neither content nor calls": (
        "chat",
        {**CHAT, "messages": [*USER, {"role": "assistant"}, *USER]},
        400,
        "messages.1",
        None,
    ),
    "a tool message without its call's id": (
        "chat",
        {**CHAT, "messages": [*USER, {"role": "tool", "content": "42"}]},
        400,
        "messages.1.tool_call_id",
        None,
    ),
    "a text part's text as a number": (
        "chat",
        {**CHAT, "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
        400,
        "messages.0.content.0.text",
        None,
    ),
    "a tool's strict as 1": (
        "chat",
        {**CHAT, "tools": [{**TOOL, "function": {**TOOL["function"], "strict": 1}}]},
        400,
        "tools.0.function.strict",
        None,
    ),
    "a message's name": (
        "chat",
        {**CHAT, "messages": [{**USER[0], "name": "x"}]},
        400,
        "messages.0.name",
        UNKNOWN,
    ),
}
PATHS = {"chat": "/v1/chat/completions", "text": "/v1/completions"}


@pytest.mark.parametrize("name", CASES)
def test_a_bad_request_is_a_4xx_naming_the_field(app, name, caplog):
    """(An exception the app did not turn into a 4xx would be raised here by the transport, as
    the server would log its traceback.)"""
    path, body, status, param, code = CASES[name]
    start = time.perf_counter()
    response = post(app, PATHS[path], body)
    assert time.perf_counter() - start < 5
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
