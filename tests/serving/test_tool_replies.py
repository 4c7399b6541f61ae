"""Tool calls end to end through the HTTP API, read by the official ``openai`` client (in process,
over ASGI): the tools reach the engine's prompt, and a call the model writes comes back in
``message.tool_calls`` or, streamed, in ``delta.tool_calls`` that the client assembles, with
``finish_reason`` "tool_calls". The engine is scripted: it answers with fixed text, streamed a
few characters a step, so what the server does with the text is all that is tested."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("sse_starlette")
pytest.importorskip("prometheus_client")

from spec_decode.core.trace import Trace  # noqa: E402
from spec_decode.serving.completion import Completion, Piece  # noqa: E402
from spec_decode.serving.request import GenerationRequest  # noqa: E402
from spec_decode.serving.server import create_app  # noqa: E402
from spec_decode.serving.state import Settings  # noqa: E402
from spec_decode.serving.worker import Worker  # noqa: E402

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
CALL = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'
USER = [{"role": "user", "content": "What is in a.py?"}]


class ScriptedEngine:
    """Answers every request with ``answer``, four characters a step; remembers the tools each
    request was prepared with."""

    context_window = 4096
    target = SimpleNamespace(model=SimpleNamespace(vocab_size=10))

    def __init__(self, answer: str) -> None:
        self.answer, self.tools, self.grammars = answer, [], []

    def prepare(self, prompt, options=None, *, max_tokens=None, limit=None, raw=False, tools=None):
        self.tools.append(tools)
        self.grammars.append(options.grammar)
        return GenerationRequest((1, 2), max_tokens or limit or 16, options)

    def generate(self, request, *, on_step=None, cancel=None) -> Completion:
        for start in range(0, len(self.answer), 4):
            if on_step is not None:
                on_step(Piece([1], self.answer[start : start + 4]))
        return Completion([1, 2], self.answer, "stop", 2, 0, Trace(), 0.0)


def chat(answer: str, stream: bool, **options):
    """The scripted engine's answer through the server, as the openai client returns it (a
    completion, or the list of streamed chunks), and the engine (what it was given)."""
    engine = ScriptedEngine(answer)
    worker = Worker(lambda: engine, max_queue=2)
    app = create_app(worker, Settings("m"))

    async def ask():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            client = openai.AsyncOpenAI(base_url="http://test/v1", api_key="x", http_client=http)
            reply = await client.chat.completions.create(
                model="m", messages=USER, stream=stream, **options
            )
            return [chunk async for chunk in reply] if stream else reply

    try:
        return asyncio.run(ask()), engine
    finally:
        worker.close(0)
        worker.join()


def assembled(chunks) -> tuple[str, list[dict], str]:
    """Content, tool calls (arguments joined by index, as clients do) and finish reason."""
    content, calls, reason = "", {}, None
    for chunk in chunks:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        for call in choice.delta.tool_calls or []:
            entry = calls.setdefault(call.index, {"name": "", "arguments": ""})
            entry["name"] += call.function.name or ""
            entry["arguments"] += call.function.arguments or ""
        reason = choice.finish_reason or reason
    return content, [calls[i] for i in sorted(calls)], reason


def test_a_call_comes_back_in_tool_calls_and_the_tools_reach_the_prompt():
    reply, engine = chat("Let me look.\n" + CALL, stream=False, tools=TOOLS)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me look."
    (call,) = choice.message.tool_calls
    assert call.function.name == "read_file" and json.loads(call.function.arguments) == {
        "path": "a.py"
    }
    assert call.id.startswith("call_") and engine.tools == [TOOLS]


def test_a_streamed_call_is_assembled_by_the_client():
    chunks, _ = chat("Let me look.\n" + CALL, stream=True, tools=TOOLS)
    content, calls, reason = assembled(chunks)
    assert content == "Let me look.\n" and reason == "tool_calls"
    assert calls == [{"name": "read_file", "arguments": '{"path": "a.py"}'}]
    assert all("<" not in (c.choices[0].delta.content or "") for c in chunks if c.choices)


@pytest.mark.parametrize("stream", [False, True])
def test_without_a_call_the_answer_is_plain_content(stream):
    reply, _ = chat("No tool needed.", stream=stream, tools=TOOLS)
    if stream:
        assert assembled(reply) == ("No tool needed.", [], "stop")
    else:
        assert reply.choices[0].message.content == "No tool needed."
        assert reply.choices[0].message.tool_calls is None


def test_tool_choice_none_gives_the_model_no_tools_and_parses_nothing():
    reply, engine = chat(CALL, stream=False, tools=TOOLS, tool_choice="none")
    assert engine.tools == [None] and reply.choices[0].message.content == CALL
    assert reply.choices[0].finish_reason == "stop"


@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "read_file"}}]
)
def test_required_and_named_choices_constrain_the_output_to_calls(choice):
    pytest.importorskip("llguidance")
    reply, engine = chat(CALL, stream=False, tools=TOOLS, tool_choice=choice)
    (grammar,) = engine.grammars
    assert engine.tools == [TOOLS] and grammar is not None and grammar.param == "tool_choice"
    assert reply.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("stream", [False, True])
def test_parallel_tool_calls_false_returns_the_first_call_only(stream):
    second = CALL.replace("a.py", "b.py")
    reply, _ = chat(CALL + "\n" + second, stream=stream, tools=TOOLS, parallel_tool_calls=False)
    calls = assembled(reply)[1] if stream else reply.choices[0].message.tool_calls
    assert len(calls) == 1
    both, _ = chat(CALL + "\n" + second, stream=False, tools=TOOLS)
    assert len(both.choices[0].message.tool_calls) == 2
