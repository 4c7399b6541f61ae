"""Real clients against ``spec-decode serve`` as a subprocess (tiny GGUF pair over a vocabulary
that can write JSON): the official ``openai`` client's structured-output parsing and its
streamed tool calls under ``tool_choice`` "required", each valid against its schema."""

from __future__ import annotations

import json
from typing import Literal

import pytest

openai = pytest.importorskip("openai")
pydantic = pytest.importorskip("pydantic")
pytest.importorskip("fastapi")
pytest.importorskip("llguidance")

from servers import MODEL, Server  # noqa: E402

USER = [{"role": "user", "content": "hi"}]


class Pick(pydantic.BaseModel):
    """What the structured answer must be: the openai client sends its strict JSON schema."""

    pick: Literal["abc", "de"]
    again: bool


READ = {
    "type": "function",
    "function": {
        "name": "read",
        "parameters": {
            "type": "object",
            "properties": {"path": {"enum": ["a", "b"]}},
            "required": ["path"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module")
def client(json_pair):
    running = Server(json_pair, "--max-tokens", "160")
    yield running.client()
    assert running.stop() == 0, "".join(running.lines)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_the_openai_client_parses_a_structured_answer(client, no_whitespace, temperature):
    completion = client.chat.completions.parse(
        model=MODEL, messages=USER, response_format=Pick, max_tokens=60,
        temperature=temperature, seed=4, logit_bias=no_whitespace,
    )  # fmt: skip
    message = completion.choices[0].message
    assert isinstance(message.parsed, Pick), message.content


def test_streamed_required_calls_assemble_into_valid_arguments(client, no_whitespace):
    calls: dict[int, dict[str, str]] = {}
    reason = None
    for chunk in client.chat.completions.create(
        model=MODEL, messages=USER, tools=[READ], tool_choice="required", stream=True,
        max_tokens=120, temperature=0, logit_bias=no_whitespace,
    ):  # fmt: skip
        if not chunk.choices:
            continue
        for call in chunk.choices[0].delta.tool_calls or []:
            entry = calls.setdefault(call.index, {"name": "", "arguments": ""})
            entry["name"] += call.function.name or ""
            entry["arguments"] += call.function.arguments or ""
        reason = chunk.choices[0].finish_reason or reason
    assert reason == "tool_calls" and calls
    for call in calls.values():
        assert call["name"] == "read" and json.loads(call["arguments"])["path"] in ("a", "b")
