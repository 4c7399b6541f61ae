"""Agent clients against ``spec-decode serve`` as a subprocess (tiny GGUF pair over a vocabulary
that can write JSON): an ``openai-agents`` agent whose model must call its function tool, runs
it and finishes; ``instructor`` extracts a pydantic model through tool calls and through a JSON
schema. The tiny model is random: what is tested is that these clients' requests are honoured
(the calls and answers parse and validate), not what a model would choose."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from typing import Literal

import pytest

openai = pytest.importorskip("openai")
pydantic = pytest.importorskip("pydantic")
pytest.importorskip("fastapi")
pytest.importorskip("llguidance")

from servers import MODEL, Server  # noqa: E402


class Pick(pydantic.BaseModel):
    pick: Literal["abc", "de"]
    again: bool


@pytest.fixture(scope="module")
def server(json_pair):
    running = Server(json_pair, "--max-tokens", "160")
    yield running
    assert running.stop() == 0, "".join(running.lines)


def reader(agents, server, task: str, read: list[str], no_whitespace) -> object:
    """An agent told ``task``, greedy, whose one tool reads file "a" or "b" (noting it in
    ``read``); its first turn must call it. A call is about 70 tokens (letters, one a token)."""

    @agents.function_tool
    def read_file(path: Literal["a", "b"]) -> str:
        """Read a file."""
        read.append(path)
        return {"a": "abc", "b": "de"}[path]

    client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0)
    return agents.Agent(
        name="reader",
        instructions=task,
        tools=[read_file],
        model=agents.OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
        model_settings=agents.ModelSettings(
            tool_choice="required",
            max_tokens=100,
            temperature=0,
            extra_body={"logit_bias": no_whitespace},
        ),
    )  # after a call the SDK resets tool_choice to auto, so the next turn may answer


def test_an_openai_agents_agent_calls_its_tool_and_finishes(server, no_whitespace):
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    read: list[str] = []
    agent = reader(agents, server, "read a", read, no_whitespace)
    result = agents.Runner.run_sync(agent, "read a", max_turns=4)
    assert read and read[0] in ("a", "b")
    assert isinstance(result.final_output, str)


def test_four_agents_at_once_each_run_as_alone(server, no_whitespace):
    """Four ``openai-agents`` agents at once on the server's slots (their requests share target
    calls): each calls the tools and ends with the answer it gets when it runs alone."""
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    tasks = ["read a", "read b", "read a then b", "read b twice"]

    async def run(task: str) -> tuple[list[str], str]:
        read: list[str] = []
        agent = reader(agents, server, task, read, no_whitespace)
        result = await agents.Runner.run(agent, task, max_turns=4)
        return read, result.final_output

    async def alone_then_together():
        alone = [await run(task) for task in tasks]
        shared = shared_decodes(server)
        together = await asyncio.gather(*(run(task) for task in tasks))
        return alone, together, shared_decodes(server) - shared

    alone, together, shared = asyncio.run(alone_then_together())
    assert all(read for read, _ in alone)
    assert list(together) == alone
    assert shared > 0, "the agents' requests never shared a target call"


def shared_decodes(server) -> float:
    """``spec_decode_shared_decodes`` from the server's ``/metrics``."""
    with urllib.request.urlopen(f"{server.url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return float(re.search(r"^spec_decode_shared_decodes (\S+)$", text, re.M).group(1))


@pytest.mark.parametrize("mode", ["TOOLS", "JSON_SCHEMA"])
def test_instructor_extracts_a_valid_model(server, no_whitespace, mode):
    instructor = pytest.importorskip("instructor")
    client = instructor.from_openai(
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0),
        mode=getattr(instructor.Mode, mode),
    )
    pick = client.chat.completions.create(
        model=MODEL, response_model=Pick, max_retries=0, max_tokens=120, temperature=0,
        logit_bias=no_whitespace, messages=[{"role": "user", "content": "pick one"}],
    )  # fmt: skip
    assert isinstance(pick, Pick)
