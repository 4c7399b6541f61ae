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
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.machine import machine
from bench.lib.prompt_sets import code_edit_sessions, humaneval, mtbench_conversations
from bench.lib.results import write_results
from bench.lib.servers import Server
from spec_decode.backends import assembly, registry

BASELINE = "llama-server target-only"
OURS = "ours default"


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
    target = str(assembly.gguf_file(registry.DEFAULT_TARGET))
    logs = Path(tempfile.mkdtemp(prefix="cold-ttft-"))
    ours = ["spec-decode", "serve", "--host", "127.0.0.1", "--threads", str(args.threads)]
    commands = {
        BASELINE: [args.llama_server, "-m", target, "-t", str(args.threads), "-c", "4096",
                   "--host", "127.0.0.1", "-np", "1", "--no-webui"],
        "ours target-only": [*ours, "--draft", "none"],
        OURS: ours,
    }  # fmt: skip
    return {
        name: Server([*command, "--port", str(args.port + i)], args.port + i, logs / f"{i}.log")
        for i, (name, command) in enumerate(commands.items())
    }


def prompts(seeds: list[int]) -> list[tuple[str, str]]:
    """(name, text) of each prompt: chat first turns, then raw HumanEval completions."""
    found = []
    for seed in seeds:
        sessions = code_edit_sessions(2, seed, 1) + mtbench_conversations(3, seed)
        found += [(f"{s.category} {s.source_id}", s.turns[0]) for s in sessions]
        found += [(f"humaneval {p.source_id}", p.text) for p in humaneval(3, seed)]
    return found


def first_token_seconds(server: Server, name: str, text: str, rep: int) -> float:
    """One streamed request of two tokens, read to its end: seconds until its first text."""
    client, model = server.client()
    opening = f"Repetition {rep}. You are a careful assistant.\n"
    common = {"model": model, "max_tokens": 2, "temperature": 0.0, "stream": True}
    begin = time.perf_counter()
    if name.startswith("humaneval"):
        chunks = client.completions.create(prompt=f"# {opening}{text}", **common)
        texts = (chunk.choices[0].text for chunk in chunks if chunk.choices)
    else:
        messages = [{"role": "system", "content": opening}, {"role": "user", "content": text}]
        chunks = client.chat.completions.create(messages=messages, **common)
        texts = (chunk.choices[0].delta.content for chunk in chunks if chunk.choices)
    first = None
    for piece in texts:  # read to the end: a stream left open would hold the next request up
        if piece and first is None:
            first = time.perf_counter() - begin
    if first is None:
        raise RuntimeError(f"no text came back for {name}")
    return first


def markdown(results: dict) -> str:
    info, seconds = results["machine"], results["seconds"]
    servers = list(seconds)
    medians = {s: {p: statistics.median(t) for p, t in seconds[s].items()} for s in servers}
    names = list(medians[BASELINE])
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
        row = " | ".join(f"{1000 * medians[s][name]:.0f}" for s in servers)
        lines.append(f"| {name} | {row} |")
    lines.append("")
    for server in servers[1:]:
        ratios = [medians[server][n] / medians[BASELINE][n] for n in names]
        sooner = sum(r <= 1 for r in ratios)
        lines.append(
            f"- {server}: no later than {BASELINE} on {sooner} of {len(names)} prompts; "
            f"ratio median {statistics.median(ratios):.3f}, worst {max(ratios):.3f}"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    args = parse_args()
    servers, chosen = make_servers(args), prompts(args.seeds)
    info = machine()
    seconds: dict[str, dict[str, list[float]]] = {name: {} for name in servers}
    order = random.Random(0)
    try:
        for server in servers.values():
            server.start()
        for rep in range(args.reps):
            for name, text in chosen:
                for server_name in order.sample(list(servers), len(servers)):
                    took = first_token_seconds(servers[server_name], name, text, rep)
                    seconds[server_name].setdefault(name, []).append(took)
            print(f"repetition {rep + 1} of {args.reps} done", flush=True)
    finally:
        for server in servers.values():
            server.stop()
    results = {"machine": info, "threads": args.threads, "reps": args.reps, "seeds": args.seeds,
               "seconds": seconds}  # fmt: skip
    write_results(args.stem, results, markdown)


if __name__ == "__main__":
    main()
