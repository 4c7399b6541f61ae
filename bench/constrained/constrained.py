"""Constrained output on the packaged Qwen pair: does a response format or a required tool call
come back valid, is speculative output still target-only output, and what does the grammar cost?

Prompts: MT-bench's extraction questions (first turns, which ask for structured answers), with
``response_format`` ``json_object`` and without; and HumanEval code-edit prompts with a
``read_file`` / ``write_file`` tool pair under ``tool_choice`` "required". Each request runs
speculative (auto) and target-only, interleaved, each from an empty KV cache, greedy and at
temperature 0.7 (coupled rule, one seed). The mask's cost per generated token (the grammar's
processing of one row, on every json_object answer's tokens) is set beside a one-token pass
(the target-only runs' time per token after the first). Run alone:

    python bench/constrained/constrained.py [--prompts 6] [--max-tokens 160]

Writes bench/results/constrained.json and .md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.machine import machine
from bench.lib.prompt_sets import code_edit, mtbench
from bench.lib.results import write_results
from spec_decode.constraints.formats import output_grammar
from spec_decode.constraints.grammar import GrammarMask
from spec_decode.core.processors import ProcessedModel
from spec_decode.core.sampling import SamplingParams
from spec_decode.serving.config import EngineConfig
from spec_decode.serving.engine import Engine
from spec_decode.serving.request import RequestOptions
from spec_decode.serving.tool_calls import split_tool_calls

TOOLS = [
    {
        "name": "read_file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
    {
        "name": "write_file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
]
SETTINGS = {"greedy": SamplingParams(0.0), "T=0.7": SamplingParams(0.7)}


def cases(n_prompts: int) -> list[dict[str, Any]]:
    """(name, messages, tools, grammar kind) for every request the benchmark sends."""
    extraction = [p for p in mtbench(80, 0) if p.source_id.endswith("(extraction)")]
    out = []
    for prompt in extraction[:n_prompts]:
        messages = [{"role": "user", "content": prompt.text}]
        for kind in ("free", "json_object"):
            out.append({"name": f"mtbench {prompt.source_id}", "kind": kind,
                        "messages": messages, "tools": None})  # fmt: skip
    for prompt in code_edit(max(1, n_prompts // 2), 0):
        text = prompt.text + "\nWrite the result to edited.py with a tool."
        out.append({"name": prompt.source_id, "kind": "tool_choice required",
                    "messages": [{"role": "user", "content": text}],
                    "tools": [{"type": "function", "function": f} for f in TOOLS]})  # fmt: skip
    return out


def grammar_of(kind: str) -> Any:
    if kind == "json_object":
        return output_grammar(answer={"type": "object"})
    if kind == "tool_choice required":
        return output_grammar(functions=TOOLS, calls_only=True)
    return None


def valid(kind: str, text: str) -> bool:
    """Whether the answer is what its kind asks: a JSON object, or only well-formed calls."""
    if kind == "json_object":
        try:
            return isinstance(json.loads(text), dict)
        except json.JSONDecodeError:
            return False
    if kind == "tool_choice required":
        content, calls = split_tool_calls(text, {f["name"] for f in TOOLS})
        return bool(calls) and not content.strip()
    return True


def run(engine: Engine, case: dict[str, Any], sampling: SamplingParams, max_tokens: int) -> dict:
    request = engine.prepare(
        case["messages"],
        RequestOptions(sampling=sampling, seed=3, grammar=grammar_of(case["kind"])),
        max_tokens=max_tokens,
        tools=case["tools"],
    )
    records: dict[str, Any] = {"prompt": list(request.prompt)}
    for label, target_only in (("speculative", False), ("target-only", True)):
        engine.forget()
        completion = engine.generate(request.target_only() if target_only else request)
        records[label] = {
            "tokens": len(completion.tokens),
            "seconds": completion.seconds,
            "target_passes": completion.trace.target_passes,
            "finish_reason": completion.finish_reason,
            "valid": valid(case["kind"], completion.text),
            "token_ids": completion.tokens,
            "text": completion.text,
            "seconds_per_token_after_first": (completion.seconds - completion.first_step_seconds)
            / max(len(completion.tokens) - 1, 1),
        }
    records["identical"] = (
        records["speculative"]["token_ids"] == records["target-only"]["token_ids"]
    )
    return records


def mask_seconds(engine: Engine, runs: list[dict[str, Any]]) -> list[float]:
    """Seconds the json_object grammar takes to process one row, at every token of every
    json_object answer (a fresh matcher walking the answer, as a generation does)."""
    vocab = engine.target.model.vocab_size
    row = np.full((1, vocab), 1.0 / vocab)
    seconds = []
    for record in runs:
        if record["kind"] != "json_object":
            continue
        prompt, answer = record["prompt"], record["target-only"]["token_ids"]
        mask = GrammarMask(grammar_of("json_object"), engine.grammar_tokenizer)
        processed = ProcessedModel(engine.target.model, [mask], start=len(prompt))
        for i in range(len(answer)):
            start = time.perf_counter()
            processed.processed(prompt + answer[:i], [()], row)
            seconds.append(time.perf_counter() - start)
    return seconds


def summary(results: dict[str, Any]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for row in results["runs"]:
        key = f"{row['kind']}, {row['setting']}"
        entry = table.setdefault(key, {"n": 0, "valid": 0, "identical": 0, "ratio": [], "rate": []})
        spec, plain = row["speculative"], row["target-only"]
        entry["n"] += 1
        entry["valid"] += spec["valid"] and plain["valid"]
        entry["identical"] += row["identical"]
        entry["ratio"].append(plain["seconds"] / spec["seconds"] * spec["tokens"] / plain["tokens"])
        entry["rate"].append(plain["tokens"] / plain["seconds"])
    return {
        key: {"requests": e["n"], "valid": e["valid"], "identical": e["identical"],
              "speedup_median": statistics.median(e["ratio"]),
              "target_only_tokens_per_s_median": statistics.median(e["rate"])}
        for key, e in table.items()
    }  # fmt: skip


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Constrained output on the packaged pair",
        "",
        f"{results['machine']['cpu']}, {results['machine']['cores']} cores; "
        f"{results['max_tokens']} tokens at most; speculative (auto) and target-only "
        "interleaved, each from an empty cache.",
        "",
        "| request, setting | requests | valid (both) | token-identical | speedup (median) "
        "| target-only tok/s (median) |",
        "|---|---|---|---|---|---|",
    ]
    for key, row in results["summary"].items():
        lines.append(
            f"| {key} | {row['requests']} | {row['valid']} | {row['identical']} | "
            f"{row['speedup_median']:.2f}x | {row['target_only_tokens_per_s_median']:.1f} |"
        )
    mask = results["mask"]
    share = mask["median_ms"] / mask["one_token_pass_ms"]
    lines += [
        "",
        f"The json_object grammar's processing of one row (mask, copy, normalisation; "
        f"{mask['rows']} rows): median {mask['median_ms']:.2f} ms, p90 {mask['p90_ms']:.2f} ms, "
        f"{share:.1%} of a one-token pass ({mask['one_token_pass_ms']:.1f} ms, the target-only "
        "runs' median time per token after the first).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=160)
    args = parser.parse_args()
    engine = Engine.load(EngineConfig())
    engine.warm_up()
    runs = []
    for case in cases(args.prompts):
        for setting, sampling in SETTINGS.items():
            record = run(engine, case, sampling, args.max_tokens)
            runs.append({"name": case["name"], "kind": case["kind"], "setting": setting, **record})
            same = "identical" if record["identical"] else "DIFFERENT"
            spec = record["speculative"]
            print(case["name"], case["kind"], setting, spec["tokens"], same, spec["valid"])
    results: dict[str, Any] = {"machine": machine(), "max_tokens": args.max_tokens, "runs": runs}
    results["summary"] = summary(results)
    per_token = [r["target-only"]["seconds_per_token_after_first"] for r in runs]
    masks = mask_seconds(engine, runs)
    results["mask"] = {
        "rows": len(masks),
        "median_ms": 1e3 * statistics.median(masks),
        "p90_ms": 1e3 * float(np.percentile(masks, 90)),
        "one_token_pass_ms": 1e3 * statistics.median(per_token),
    }
    write_results("constrained", results, markdown)


if __name__ == "__main__":
    main()
