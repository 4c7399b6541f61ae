"""Several ``openai-agents`` agents at once on ``spec-decode serve``: same answers as alone, and
what reading their shared prefix again costs.

Each agent has one tool, ``read_file``, over a two-file project and its own question; greedy.
They run one after another, then all at once, on one server with the default slots. Reported per
agent: the files it read and its answer, whether both are the same at once as alone, and its
seconds; per phase: wall clock and the server's ``/metrics`` token counters (prompt tokens, those
served from a slot's cache, generated, drafted, accepted), and the target decodes the requests
shared. The agents share a prefix (system prompt and tool). ``--cold`` runs the phase all at
once first, on the fresh server, where no slot holds the prefix yet. Run alone:

    python bench/serving/agents_at_once.py [--agents 4] [--cold]

Writes bench/results/agents_at_once.json and .md (``agents_at_once_cold`` with ``--cold``).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.machine import machine
from bench.lib.results import write_results
from bench.lib.servers import Server

FILES = {
    "util.py": "def total(xs):\n    return sum(xs)\n",
    "main.py": "from util import total\nprint(total([1, 2, 3]))\n",
}
#: Written for this benchmark: questions about :data:`FILES`, one an agent.
QUESTIONS = [
    "What does util.py define? Read it first.",
    "Read main.py and tell me what it prints.",
    "Read util.py and main.py, then say how they are related.",
    "Is there a bug in util.py? Read it and answer in one sentence.",
    "Which file imports the other? Read them to find out.",
    "Does main.py handle an empty list? Read both files and answer.",
    "What would total([]) return? Read util.py first.",
    "Summarise the project in one sentence after reading its files.",
]
INSTRUCTIONS = "You answer questions about a small Python project. Use read_file to read files."
COUNTERS = re.compile(r'^spec_decode_tokens_total\{kind="(\w+)"\} (\S+)$', re.M)
SHARED = re.compile(r"^spec_decode_shared_decodes (\S+)$", re.M)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=4, choices=range(1, len(QUESTIONS) + 1))
    parser.add_argument("--port", type=int, default=18620)
    parser.add_argument("--cold", action="store_true", help="all at once first, on a fresh server")
    args = parser.parse_args()
    log = Path(tempfile.mkdtemp(prefix="agents-at-once-")) / "server.log"
    server = Server(["spec-decode", "serve", "--port", str(args.port)], args.port, log)
    server.start()
    try:
        results = run(server, QUESTIONS[: args.agents], args.cold)
    finally:
        server.stop()
    cold = " --cold" if args.cold else ""
    results["command"] = f"python bench/serving/agents_at_once.py --agents {args.agents}{cold}"
    write_results("agents_at_once_cold" if args.cold else "agents_at_once", results, markdown)


def run(server: Server, questions: list[str], cold: bool) -> dict:
    """Both phases on ``server``: one after another, then all at once (``cold``: the other way
    round)."""
    import agents
    import openai

    agents.set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=f"{server.base}/v1", api_key="none", max_retries=0)
    model = agents.OpenAIChatCompletionsModel(model="qwen2.5-coder-1.5b", openai_client=client)

    async def ask(question: str) -> dict:
        read: list[str] = []

        @agents.function_tool
        def read_file(path: Literal["util.py", "main.py"]) -> str:
            """Read a file of the project."""
            read.append(path)
            return FILES[path]

        agent = agents.Agent(
            name="reader", instructions=INSTRUCTIONS, tools=[read_file], model=model,
            model_settings=agents.ModelSettings(temperature=0, max_tokens=160),
        )  # fmt: skip
        started = time.perf_counter()
        result = await agents.Runner.run(agent, question, max_turns=5)
        return {"read": read, "answer": result.final_output,
                "seconds": round(time.perf_counter() - started, 2)}  # fmt: skip

    async def one_after_another() -> list[dict]:
        return [await ask(q) for q in questions]

    async def all_at_once() -> list[dict]:
        return list(await asyncio.gather(*(ask(q) for q in questions)))

    async def phase(answers: Callable[[], Awaitable[list[dict]]]) -> dict:
        before, started = metrics(server), time.perf_counter()
        agents_answers = await answers()
        seconds = round(time.perf_counter() - started, 2)
        return {"seconds": seconds, "agents": agents_answers, **changed(before, metrics(server))}

    async def phases() -> dict:
        if cold:
            together = await phase(all_at_once)
            return {"alone": await phase(one_after_another), "together": together, "cold": True}
        alone = await phase(one_after_another)
        return {"alone": alone, "together": await phase(all_at_once), "cold": False}

    return {"machine": machine(), "questions": questions, **asyncio.run(phases())}


def metrics(server: Server) -> dict[str, float]:
    """The server's token counters and shared decodes, from ``/metrics``."""
    with urllib.request.urlopen(f"{server.base}/metrics", timeout=30) as response:
        text = response.read().decode()
    counters = {kind: float(value) for kind, value in COUNTERS.findall(text)}
    return {**counters, "shared_decodes": float(SHARED.search(text).group(1))}


def changed(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What each counter gained between two reads."""
    return {key: after[key] - before.get(key, 0.0) for key in after}


def markdown(results: dict) -> str:
    alone, together = results["alone"], results["together"]
    same = sum(
        (a["read"], a["answer"]) == (b["read"], b["answer"])
        for a, b in zip(alone["agents"], together["agents"], strict=True)
    )
    rows = [
        f"| {name} | {p['seconds']:.1f} | {p['prompt']:.0f} | {p['cached']:.0f} | "
        f"{p['prompt'] - p['cached']:.0f} | {p['generated']:.0f} | {p['accepted']:.0f} / "
        f"{p['drafted']:.0f} | {p['shared_decodes']:.0f} |"
        for name, p in (("one after another", alone), ("all at once", together))
    ]
    return "\n".join(
        [
            f"## Agents at once (`{results['command']}`, {results['created']})",
            "",
            f"{results['machine']['cpu']}, {results['machine']['cores']} cores; "
            "`spec-decode serve` with its defaults"
            + ("; all at once first, on the fresh server; " if results.get("cold") else "; ")
            + f"{len(alone['agents'])} `openai-agents` agents, greedy, each with `read_file` "
            f"over a two-file project. **{same} of {len(alone['agents'])} agents read the same "
            "files and gave the same answer at once as alone.**",
            "",
            "| phase | wall s | prompt tokens | from a slot's cache | read | generated "
            "| accepted / drafted | shared decodes |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    )


if __name__ == "__main__":
    main()
