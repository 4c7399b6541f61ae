"""Time to first token on cold prompts: llama-server target-only beside ``spec-decode serve``
(target-only and default), the same prompts interleaved, each request from an empty cache.

A cold turn's first token waits for the whole prompt to be read, so this isolates what the
serving benchmark's per-turn figures mix with everything else: the prompt read, and what a server
does before it. Every request opens with a system message naming its repetition, so no server
holds any of it but the chat template's first tokens; servers answer in a shuffled order for each
prompt. Prompts: the first turns of code-edit sessions and MT-bench conversations, and HumanEval
completions, from two seeds.

    python bench/serving/cold_ttft.py --llama-server PATH
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.machine import machine
from bench.lib.prompt_sets import code_edit_sessions, humaneval, mtbench_conversations
from bench.lib.repetitions import interleaved
from bench.lib.results import write_results
from bench.lib.serve_client import BASELINE, Variant, run_turn, server_command
from bench.lib.servers import Server
from spec_decode.backends import assembly, registry

VARIANTS = (
    Variant(BASELINE, "llama-server"),
    Variant("ours target-only", "ours", ("--draft", "none")),
    Variant("ours default", "ours"),
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-server", required=True, help="the llama-server binary")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seeds", default="0,1", help="prompt-set seeds, comma-separated")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--port", type=int, default=18300, help="first port")
    parser.add_argument("--stem", default="cold_ttft")
    args = parser.parse_args()
    if args.reps < 1 or args.threads < 1:
        parser.error("--reps and --threads must be >= 1")
    try:
        args.seeds = [int(seed) for seed in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds must be integers separated by commas, got {args.seeds!r}")
    return args


def make_servers(args: argparse.Namespace) -> dict[str, Server]:
    target = assembly.gguf_file(registry.DEFAULT_TARGET)
    logs = Path(tempfile.mkdtemp(prefix="cold-ttft-"))
    servers = {}
    for i, variant in enumerate(VARIANTS):
        port = args.port + i
        command = server_command(
            variant,
            target=target,
            port=port,
            threads=args.threads,
            ctx=4096,
            llama_server=args.llama_server,
            ours_command="spec-decode serve",
        )
        servers[variant.name] = Server(command, port, logs / f"{i}.log")
    return servers


def requests(seeds: list[int]) -> dict[str, dict[str, object]]:
    """Each prompt's request by name: chat first turns (``messages``), then raw HumanEval
    completions (``prompt``), without their opening (:func:`cold`)."""
    found: dict[str, dict[str, object]] = {}
    for seed in seeds:
        for s in code_edit_sessions(2, seed, 1) + mtbench_conversations(3, seed):
            found[f"{s.category} {s.source_id}"] = {
                "messages": [{"role": "user", "content": s.turns[0]}]
            }
        for prompt in humaneval(3, seed):
            found[f"humaneval {prompt.source_id}"] = {"prompt": prompt.text}
    return found


def cold(request: dict[str, object], rep: int) -> dict[str, object]:
    """``request`` opened by a line naming repetition ``rep`` (a system message, or a comment
    before a raw prompt): no server holds it cached from the last repetition."""
    opening = f"Repetition {rep}. You are a careful assistant.\n"
    if "messages" in request:
        return {"messages": [{"role": "system", "content": opening}, *request["messages"]]}
    return {"prompt": f"# {opening}{request['prompt']}"}


def markdown(results: dict) -> str:
    info, seconds = results["machine"], results["seconds"]
    names = list(seconds)
    servers = list(seconds[names[0]])
    medians = {n: {s: statistics.median(seconds[n][s]) for s in servers} for n in names}
    lines = [
        "## Time to first token on cold prompts (`python bench/serving/cold_ttft.py`)",
        "",
        f"{info['cpu']}, {info['cores']} cores, {results['threads']} threads; "
        f"{results['reps']} repetitions, servers interleaved in a shuffled order per prompt, "
        "every request from an empty cache (a system message or comment naming its repetition "
        "opens it); median milliseconds to the first streamed text.",
        "",
        "| prompt | " + " | ".join(servers) + " |",
        "|---" * (len(servers) + 1) + "|",
    ]
    for name in names:
        row = " | ".join(f"{1000 * medians[name][s]:.0f}" for s in servers)
        lines.append(f"| {name} | {row} |")
    lines.append("")
    for server in servers:
        if server == BASELINE:
            continue
        ratios = [medians[n][server] / medians[n][BASELINE] for n in names]
        sooner = sum(r <= 1 for r in ratios)
        lines.append(
            f"- {server}: no later than {BASELINE} on {sooner} of {len(names)} prompts; "
            f"ratio median {statistics.median(ratios):.3f}, worst {max(ratios):.3f}"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    args = parse_args()
    servers, chosen = make_servers(args), requests(args.seeds)
    variants = {v.name: v for v in VARIANTS}
    info = machine()
    clients = {}

    def first_token(name: str, server: str, rep: int) -> dict[str, object]:
        client, model = clients[server]
        turn = run_turn(client, model, variants[server], cold(chosen[name], rep), tokens=2)
        if turn["ttft_s"] is None:
            raise RuntimeError(f"{server} returned no text for {name}")
        return {"generated": turn["completion_tokens"], **turn}

    try:
        for name, server in servers.items():
            server.start()
            clients[name] = server.client()
        raw = interleaved(list(chosen), lambda _: list(servers), args.reps, first_token)
    finally:
        for server in servers.values():
            server.stop()
    seconds = {  # the servers in VARIANTS' order, whatever order they answered in
        name: {server: [r["ttft_s"] for r in by_server[server]] for server in servers}
        for name, by_server in raw.items()
    }
    results = {"machine": info, "threads": args.threads, "reps": args.reps, "seeds": args.seeds,
               "seconds": seconds}  # fmt: skip
    write_results(args.stem, results, markdown)


if __name__ == "__main__":
    main()
