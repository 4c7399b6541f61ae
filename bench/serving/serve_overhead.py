"""What the HTTP server costs over the engine called in-process, on the packaged pair.

The same engine configuration runs the same requests in this process and behind
``spec-decode serve`` (a subprocess, streamed through httpx, one request at a time), alternating
request by request so background load hits both alike, and both engines see the same sequence
of requests (so their KV caches and histories are in the same state). Per request: time to the
first text (in-process: from the call to the first step's callback, which is prompt processing
plus one step; through the server: from sending the request to the first streamed chunk) and
generation tokens/s after it (tokens after the first over the time from the first to the
last). Each prompt is new once (only the chat template's opening is cached) and then repeated
(all but its last 8 tokens are cached). On a shared machine the two sides' wall times move with
other load; the server's ``engine_timings`` give a comparison within each request too: the client's
tokens/s against the engine's inside the server, and the time to first text minus the queue
wait and the engine's first step.

    python bench/serving/serve_overhead.py [--draft none|qwen2.5-coder-0.5b] [--reps 3]
        [--tokens 64] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.machine import machine
from bench.lib.results import write_results
from spec_decode.core.sampling import SamplingParams
from spec_decode.serving.config import EngineConfig
from spec_decode.serving.engine import Engine
from spec_decode.serving.request import RequestOptions

PROMPTS = [
    "Write a Python function that checks whether a number is prime.",
    "Explain the difference between a list and a tuple in Python, with examples.",
    "Write a function that merges two sorted lists into one sorted list.",
]
GREEDY = SamplingParams(temperature=0)


def in_process(engine: Engine, prompt: str, tokens: int) -> dict[str, float]:
    request = engine.prepare(prompt, RequestOptions(sampling=GREEDY), max_tokens=tokens)
    stamps: list[float] = []
    start = time.perf_counter()
    done = engine.generate(request, on_step=lambda _: stamps.append(time.perf_counter()))
    return record(start, stamps[0], stamps[-1], len(done.tokens), done.tokens)


def through_server(client: httpx.Client, url: str, prompt: str, tokens: int) -> dict[str, float]:
    body = {
        "model": "qwen2.5-coder-1.5b",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": tokens,
        "temperature": 0,
        "stream": True,
        "return_token_ids": True,
    }
    ids: list[int] = []
    first = last = 0.0
    start = time.perf_counter()
    with client.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=600) as response:
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            choice = (chunk["choices"] or [{}])[0]
            if choice.get("token_ids"):
                last = time.perf_counter()
                first = first or last
                ids += choice["token_ids"]
            server = chunk.get("engine_timings", {})
    measured = record(start, first, last, len(ids), ids)
    # the same request as the engine inside the server saw it: what the HTTP layer added
    engine_s = (server["generation_ms"] - server["first_step_ms"]) / 1e3
    measured["engine_gen_tokens_per_s"] = (len(ids) - 1) / engine_s if engine_s > 0 else math.nan
    measured["ttft_over_engine_ms"] = (
        1e3 * measured["ttft_s"] - server["queued_ms"] - server["first_step_ms"]
    )
    return measured


def record(start: float, first: float, last: float, n: int, ids: list[int]) -> dict[str, float]:
    rate = (n - 1) / (last - first) if n > 1 and last > first else float("nan")
    return {"ttft_s": first - start, "tokens": n, "gen_tokens_per_s": rate, "ids": ids}


def start_server(draft: str, threads: int | None) -> tuple[subprocess.Popen, str]:
    command = [sys.executable, "-m", "spec_decode.cli.app", "serve", "--port", "0"]
    command += ["--draft", draft] + (["--threads", str(threads)] if threads else [])
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=os.environ)
    assert process.stderr is not None
    for line in process.stderr:
        found = re.search(r"on (http://[\d.]+:\d+)/v1", line)
        if found:
            return process, found.group(1)
    raise RuntimeError("the server did not start")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--draft", default="none")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    info = machine()  # the load average at the start
    engine = Engine.load(EngineConfig(draft=args.draft, threads=args.threads))
    engine.warm_up()
    process, url = start_server(args.draft, args.threads)
    rows: dict[str, list[dict[str, float]]] = {}
    client = httpx.Client()  # one client: building one per request costs more than the server
    try:
        for rep in range(args.reps):
            for i, prompt in enumerate(PROMPTS):
                unseen = f"{prompt} (variant {rep})"  # a prompt the server has not cached
                for turn in ("new", "repeated"):
                    ours = in_process(engine, unseen, args.tokens)
                    served = through_server(client, url, unseen, args.tokens)
                    assert ours["ids"] == served["ids"], "server and engine disagree"
                    rows.setdefault(f"in-process {turn}", []).append(ours)
                    rows.setdefault(f"server {turn}", []).append(served)
                    print(
                        f"rep {rep} prompt {i} {turn}: in-process {ours['gen_tokens_per_s']:.2f} "
                        f"tok/s ttft {ours['ttft_s'] * 1e3:.0f} ms | server "
                        f"{served['gen_tokens_per_s']:.2f} tok/s ttft "
                        f"{served['ttft_s'] * 1e3:.0f} ms",
                        flush=True,
                    )
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    summary = {
        name: {
            "median_gen_tokens_per_s": statistics.median(r["gen_tokens_per_s"] for r in runs),
            "median_ttft_ms": 1e3 * statistics.median(r["ttft_s"] for r in runs),
            **(
                {
                    "median_ratio_to_engine_inside": statistics.median(
                        r["gen_tokens_per_s"] / r["engine_gen_tokens_per_s"] for r in runs
                    ),
                    "median_ttft_over_engine_ms": statistics.median(
                        r["ttft_over_engine_ms"] for r in runs
                    ),
                }
                if name.startswith("server")
                else {}
            ),
            "runs": [{k: v for k, v in r.items() if k != "ids"} for r in runs],
        }
        for name, runs in rows.items()
    }
    results = {"machine": info, "draft": args.draft, "tokens": args.tokens, "rows": summary}
    results["threads"] = args.threads
    write_results(f"serve_overhead_{args.draft}", results, markdown)


def markdown(results: dict[str, object]) -> str:
    rows = results["rows"]
    lines = [
        f"# Server overhead (draft {results['draft']}, {results['tokens']} tokens, greedy, "
        f"threads {results['threads'] or 'all'})",
        "",
        "| turn | in-process tok/s | server tok/s | ratio | in-process first step ms "
        "| server TTFT ms | difference ms | server tok/s / its engine's | TTFT - its engine's "
        "first step, ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for turn in ("new", "repeated"):
        ours, served = rows[f"in-process {turn}"], rows[f"server {turn}"]
        a, b = ours["median_gen_tokens_per_s"], served["median_gen_tokens_per_s"]
        ta, tb = ours["median_ttft_ms"], served["median_ttft_ms"]
        inside, over = served["median_ratio_to_engine_inside"], served["median_ttft_over_engine_ms"]
        lines.append(
            f"| {turn} | {a:.2f} | {b:.2f} | {b / a:.3f} | {ta:.0f} | {tb:.0f} | {tb - ta:+.0f} "
            f"| {inside:.3f} | {over:+.1f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
