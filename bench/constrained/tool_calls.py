"""Constrained outputs at volume on the packaged pair: do required tool calls and json_schema
answers always parse and validate?

Requests (speculative, auto, greedy; token identity with target-only decoding is
bench/constrained/constrained.py's): HumanEval code-edit and MT-bench prompts with ``read_file`` and
``run_tests`` tools under ``tool_choice`` "required", and MT-bench prompts under a
``response_format`` JSON schema; every call's arguments and every answer checked with
``jsonschema`` against its schema. An answer cut by the token limit is counted apart: the
grammar cannot shorten what the model writes. With ``--llama-server PATH`` the same call
prompts also go out under ``tool_choice`` "auto" (the model may call or answer) to ours and to
llama-server ``--jinja`` (same GGUF, its own tool-call parser), and the answers that come back
as valid calls are counted for each. Run alone:

    python bench/constrained/tool_calls.py [--calls 50] [--answers 20] [--max-tokens 96] \
        [--llama-server PATH/build/bin/llama-server]

Writes bench/results/tool_calls.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.machine import machine
from bench.lib.prompt_sets import code_edit, mtbench
from bench.lib.results import RESULTS, write_results
from bench.lib.servers import Server
from spec_decode.backends import assembly, registry
from spec_decode.constraints.formats import output_grammar
from spec_decode.core.sampling import SamplingParams
from spec_decode.serving.config import EngineConfig
from spec_decode.serving.engine import Engine
from spec_decode.serving.request import RequestOptions
from spec_decode.serving.tool_calls import split_tool_calls

PATH = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
TOOLS = [
    {"name": "read_file", "description": "Read a file of the repository.", "parameters": PATH},
    {"name": "run_tests", "description": "Run the tests in a file.", "parameters": PATH},
]
ANSWER = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "maxLength": 200},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
    },
    "required": ["answer", "confidence"],
    "additionalProperties": False,
}


def validates(name: str, arguments: str) -> bool:
    """Whether a call names one of :data:`TOOLS` and its arguments match its parameters."""
    schemas = {tool["name"]: tool["parameters"] for tool in TOOLS}
    try:
        jsonschema.validate(json.loads(arguments), schemas[name])
    except (KeyError, json.JSONDecodeError, jsonschema.ValidationError):
        return False
    return True


def checked_calls(text: str) -> tuple[bool, bool]:
    """(parsed: the answer is nothing but calls, valid: each names a tool and its arguments
    validate against the tool's parameters)."""
    content, calls = split_tool_calls(text, {tool["name"] for tool in TOOLS})
    if not calls or content.strip():
        return False, False
    return True, all(validates(call.name, call.arguments) for call in calls)


def checked_answer(text: str) -> tuple[bool, bool]:
    """(parsed as JSON, valid against :data:`ANSWER`)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return False, False
    try:
        jsonschema.validate(value, ANSWER)
    except jsonschema.ValidationError:
        return True, False
    return True, True


def requests(calls: int, answers: int) -> list[dict[str, Any]]:
    edits, chats = code_edit(calls - calls // 2, 0), mtbench(calls // 2 + answers, 1)
    out = []
    for prompt in edits:
        text = prompt.text + "\n\nThe code is in solution.py; look at it or test it first."
        out.append({"kind": "required call", "name": prompt.source_id, "text": text})
    for prompt in chats[: calls // 2]:
        out.append({"kind": "required call", "name": prompt.source_id, "text": prompt.text})
    for prompt in chats[calls // 2 :]:
        out.append({"kind": "json_schema answer", "name": prompt.source_id, "text": prompt.text})
    return out


def run(engine: Engine, request: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    calls = request["kind"] == "required call"
    if calls:
        grammar = output_grammar(functions=TOOLS, calls_only=True)
    else:
        grammar = output_grammar(answer=ANSWER)
    tools = [{"type": "function", "function": tool} for tool in TOOLS] if calls else None
    prepared = engine.prepare(
        [{"role": "user", "content": request["text"]}],
        RequestOptions(sampling=SamplingParams(0.0), grammar=grammar),
        max_tokens=max_tokens,
        tools=tools,
    )
    completion = engine.generate(prepared)
    parsed, valid = (checked_calls if calls else checked_answer)(completion.text)
    return {
        **request,
        "tokens": len(completion.tokens),
        "seconds": completion.seconds,
        "finish_reason": completion.finish_reason,
        "parsed": parsed,
        "valid": valid,
        "output": completion.text,
    }


def complete_calls(text: str) -> tuple[int, int]:
    """(complete calls in ``text``, those whose arguments validate): a cut answer's finished
    calls count too."""
    calls = split_tool_calls(text, {tool["name"] for tool in TOOLS})[1]
    return len(calls), sum(validates(call.name, call.arguments) for call in calls)


def auto_calls(engine: Engine, request: dict[str, Any], max_tokens: int) -> int:
    """Valid calls in our answer to a call prompt under ``tool_choice`` "auto" (no grammar:
    the calls the server parses out of the model's text)."""
    tools = [{"type": "function", "function": tool} for tool in TOOLS]
    prepared = engine.prepare(
        [{"role": "user", "content": request["text"]}],
        RequestOptions(sampling=SamplingParams(0.0)),
        max_tokens=max_tokens,
        tools=tools,
    )
    return complete_calls(engine.generate(prepared).text)[1]


def llama_server_auto_calls(
    binary: Path, requests: list[dict[str, Any]], max_tokens: int
) -> list[int]:
    """Valid calls in llama-server's (``--jinja``) answer to each call prompt under "auto"."""
    target = assembly.gguf_file(registry.DEFAULT_TARGET)
    log = Path(tempfile.mkdtemp(prefix="tool-calls-")) / "llama-server.log"
    command = [str(binary), "-m", str(target), "-t", "2", "-c", "4096", "--jinja", "-np", "1"]
    server = Server([*command, "--host", "127.0.0.1", "--port", "8097", "--no-webui"], 8097,
                    log, dict(os.environ))  # fmt: skip
    server.start()
    try:
        client, model = server.client()
        counts = []
        for request in requests:
            reply = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": request["text"]}],
                tools=[{"type": "function", "function": tool} for tool in TOOLS],
                max_tokens=max_tokens, temperature=0.0,
            )  # fmt: skip
            counts.append(
                sum(
                    validates(call.function.name, call.function.arguments)
                    for call in reply.choices[0].message.tool_calls or []
                )
            )
        return counts
    finally:
        server.stop()


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Constrained outputs at volume (packaged pair, greedy, speculative)",
        "",
        f"{results['machine']['cpu']}, {results['machine']['cores']} cores; "
        f"{results['max_tokens']} tokens at most.",
        "",
        "| requests | n | finished | parsed (finished) | valid (finished) | cut by the limit |",
        "|---|---|---|---|---|---|",
    ]
    for kind in ("required call", "json_schema answer"):
        rows = [r for r in results["runs"] if r["kind"] == kind]
        done = [r for r in rows if r["finish_reason"] != "length"]
        lines.append(
            f"| {kind} | {len(rows)} | {len(done)} | {sum(r['parsed'] for r in done)} | "
            f"{sum(r['valid'] for r in done)} | {len(rows) - len(done)} |"
        )
    counted = [complete_calls(r["output"]) for r in results["runs"] if r["kind"] == "required call"]
    lines += [
        "",
        f"Required calls, every answer counted (cut ones too): {sum(n > 0 for n, _ in counted)} "
        f"of {len(counted)} answers hold at least one complete call; "
        f"{sum(v for _, v in counted)} of {sum(n for n, _ in counted)} complete calls validate.",
    ]
    if "auto" in results:
        auto = results["auto"]
        lines += [
            "",
            "Under `tool_choice: auto` (the same call prompts, no grammar):",
            "",
            "| server | answers with a valid call | valid calls |",
            "|---|---|---|",
        ]
        for name, counts in auto.items():
            lines.append(
                f"| {name} | {sum(c > 0 for c in counts)} of {len(counts)} | {sum(counts)} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--answers", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--llama-server", type=Path, help="also compare tool_choice auto")
    parser.add_argument(
        "--auto-only", action="store_true", help="add the auto comparison to the saved results"
    )
    args = parser.parse_args()
    engine = Engine.load(EngineConfig())
    engine.warm_up()
    if args.auto_only:
        results = json.loads((RESULTS / "tool_calls.json").read_text())
    else:
        runs = []
        for request in requests(args.calls, args.answers):
            runs.append(run(engine, request, args.max_tokens))
            last = runs[-1]
            print(last["kind"], last["name"], last["finish_reason"], last["parsed"], last["valid"])
        results = {"machine": machine(), "max_tokens": args.max_tokens, "runs": runs}
    if args.llama_server is not None:
        calls = [r for r in requests(args.calls, args.answers) if r["kind"] == "required call"]
        ours = [auto_calls(engine, request, args.max_tokens) for request in calls]
        engine.forget()
        theirs = llama_server_auto_calls(args.llama_server, calls, args.max_tokens)
        results["auto"] = {"spec-decode serve": ours, "llama-server --jinja": theirs}
    write_results("tool_calls", results, markdown)


if __name__ == "__main__":
    main()
