"""Constrained output and processors through the engine and the server (tiny GGUF pair over
a vocabulary that can write JSON): response formats and required or named tool calls come back
valid, penalties and logit bias are honoured, and every one of them leaves speculative output
token-identical to target-only decoding (greedy, and sampled under the coupled rule)."""

from __future__ import annotations

import asyncio
import json

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("llguidance")

from conftest import running  # noqa: E402

from spec_decode.constraints.formats import output_grammar  # noqa: E402
from spec_decode.core.processors import LogitBias, Penalties  # noqa: E402
from spec_decode.core.sampling import SamplingParams  # noqa: E402
from spec_decode.serving.config import EngineConfig  # noqa: E402
from spec_decode.serving.engine import Engine  # noqa: E402
from spec_decode.serving.request import RequestOptions  # noqa: E402
from spec_decode.serving.server import create_app  # noqa: E402
from spec_decode.serving.state import Settings  # noqa: E402

MODEL = "target"
USER = [{"role": "user", "content": "hi"}]
#: A schema every answer ends in a few tokens: two fields of bounded values.
PICK = {
    "type": "object",
    "properties": {"pick": {"enum": ["abc", "de"]}, "n": {"type": "integer", "maximum": 99}},
    "required": ["pick", "n"],
    "additionalProperties": False,
}
READ = {
    "type": "object",
    "properties": {"path": {"enum": ["a", "b"]}},
    "required": ["path"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "read", "parameters": READ}},
    {"type": "function", "function": {"name": "pick", "parameters": PICK}},
]
SAMPLINGS = {"greedy": SamplingParams(0.0), "T=0.8": SamplingParams(0.8)}


@pytest.fixture(scope="module")
def engine(json_pair):
    """Drafting 3 tokens every step: the auto policy drafts only where this machine's measured
    curve says it pays, and then these tests would check nothing speculative."""
    target, draft = json_pair
    config = EngineConfig(target=str(target), draft=str(draft), threads=1, policy="fixed", k=3)
    return Engine.load(config)


@pytest.fixture(scope="module")
def quiet(no_whitespace):
    """The no-whitespace bias as the engine takes it."""
    return LogitBias({int(token): bias for token, bias in no_whitespace.items()})


def both(engine, **options):
    """The speculative and the target-only completion of one prepared request."""
    request = engine.prepare(USER, RequestOptions(seed=5, **options), max_tokens=60)
    return engine.generate(request), engine.generate(request.target_only())


def valid_pick(value) -> bool:
    return set(value) == {"pick", "n"} and value["pick"] in ("abc", "de") and value["n"] <= 99


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_a_json_schema_answer_is_valid_and_target_only_output(engine, quiet, sampling):
    grammar = output_grammar(answer=PICK)
    spec, plain = both(engine, grammar=grammar, sampling=SAMPLINGS[sampling], logit_bias=quiet)
    assert spec.tokens == plain.tokens
    assert spec.finish_reason == "stop" and valid_pick(json.loads(spec.text))


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_penalties_and_bias_leave_speculation_exact(engine, sampling):
    options = {"penalties": Penalties(0.7, 0.4), "logit_bias": LogitBias({5: 3.0, 6: -2.0})}
    spec, plain = both(engine, sampling=SAMPLINGS[sampling], **options)
    assert spec.tokens == plain.tokens and spec.trace.proposed > 0
    unshaped, _ = both(engine, sampling=SAMPLINGS[sampling])
    assert unshaped.tokens != spec.tokens


@pytest.fixture(scope="module")
def chat(json_pair, no_whitespace):
    """``chat(**fields)``: one greedy chat completion's choice from the app over ASGI, with the
    no-whitespace bias unless the fields give their own."""
    target, draft = json_pair
    with running(EngineConfig(target=str(target), draft=str(draft), threads=1), 4) as worker:
        app = create_app(worker, Settings(MODEL, max_tokens=160))
        yield lambda **fields: ask(app, {"logit_bias": no_whitespace, **fields})


def ask(app, fields: dict) -> dict:
    body = {"model": MODEL, "messages": USER, "max_tokens": 60, "temperature": 0, **fields}

    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post("/v1/chat/completions", json=body)

    response = asyncio.run(send())
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]


def test_response_format_json_schema_over_the_api(chat):
    schema = {"name": "pick", "schema": PICK, "strict": True}
    choice = chat(response_format={"type": "json_schema", "json_schema": schema})
    assert valid_pick(json.loads(choice["message"]["content"]))


def test_response_format_json_object_over_the_api(chat):
    choice = chat(response_format={"type": "json_object"}, max_tokens=80)
    content = choice["message"]["content"]
    assert content.startswith("{")  # an object (it may run to the token limit unfinished)


@pytest.mark.parametrize(
    ("choice", "names"),
    [
        ("required", {"read", "pick"}),
        ({"type": "function", "function": {"name": "pick"}}, {"pick"}),
    ],
    ids=["required", "named"],
)
def test_required_and_named_tool_choices_give_valid_calls(chat, choice, names):
    answer = chat(
        tools=TOOLS, tool_choice=choice, parallel_tool_calls=False, max_tokens=120
    )  # a call of about 100 letters, one token each
    calls = answer["message"]["tool_calls"]
    assert answer["finish_reason"] == "tool_calls" and len(calls) == 1
    function = calls[0]["function"]
    arguments = json.loads(function["arguments"])
    assert function["name"] in names
    assert valid_pick(arguments) if function["name"] == "pick" else arguments["path"] in "ab"


def test_a_logit_bias_of_100_forces_its_token(chat):
    forced = chat(logit_bias={"5": 100}, max_tokens=6)  # token 5 is "b"
    assert forced["message"]["content"].strip() == "bbbbbb"
