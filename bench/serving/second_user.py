"""The second user's first token, many times over, on servers started once: llama-server
``-np N`` target-only, ours with and without drafting, and (``--before COMMAND``) ours from
another checkout, probed in a seeded shuffled order each trial.

A trial: N - 1 long answers (code edits on HumanEval tasks drawn for the trial, greedy) stream,
and 1 s after all of them stream a short question, another each trial, is sent; its time to first
token is recorded and the long answers are cancelled (``bench/lib/concurrent_client.py``, as
``concurrent_users.py`` probes). Each trial's prompts are new to every server; the chat
template's prefix is cached alike by all. Per variant: min, p10, median and max over the trials.

    python bench/serving/second_user.py --llama-server PATH --trials 12 --seed 2000
    python bench/serving/second_user.py --llama-server PATH \\
        --before "env PYTHONPATH=OLD_CHECKOUT/src python -m spec_decode.cli.app serve"

Writes ``bench/results/second_user.json`` and ``.md`` (``--stem`` renames them).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.concurrent_client import QUESTIONS, probe_requests, second_user
from bench.lib.concurrent_servers import BEFORE, Servers, variants
from bench.lib.machine import machine
from bench.lib.results import write_results
from bench.lib.servers import Server
from bench.lib.summaries import quantiles


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-server", type=Path, required=True)
    parser.add_argument("--before", help="the serve command of another checkout, beside ours")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--slots", type=int, default=4, help="-np / --parallel; N - 1 longs")
    parser.add_argument("--seed", type=int, default=2000, help="long answers' tasks, and order")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--stem", default="second_user")
    args = parser.parse_args()
    if args.trials < 1 or args.slots < 2:
        parser.error("--trials must be >= 1 and --slots >= 2")
    return args


def server_args(args: argparse.Namespace) -> argparse.Namespace:
    """What :class:`Servers` and :func:`variants` read."""
    names = ["llama-server target-only", "ours target-only", "ours default"]
    names += [name + BEFORE for name in names[1:]] if args.before else []
    return argparse.Namespace(
        llama_server=args.llama_server, ours_command="spec-decode serve", before=args.before,
        ours_args="", llama_args="", variants=";".join(names), ignore_eos=False,
        slots=args.slots, ctx=4096, threads=args.threads, start_timeout=1800.0, env={},
    )  # fmt: skip


def main() -> None:
    args = parse_args()
    info = machine()
    ours = server_args(args)
    chosen, servers = variants(ours), Servers(ours)
    started: dict[str, Server] = {}
    seconds: dict[str, list[float]] = {v.name: [] for v in chosen}
    try:
        for variant in chosen:
            started[variant.name] = servers.fresh(variant)
        for trial in range(args.trials):
            longs, (short,) = probe_requests(args.slots - 1, args.seed + trial, set())
            question = f"({trial + 1}) {QUESTIONS[trial % len(QUESTIONS)]}"
            short = dataclasses.replace(
                short, body={"messages": [{"role": "user", "content": question}]}
            )
            for variant in random.Random(args.seed + trial).sample(chosen, len(chosen)):
                probe = second_user(
                    started[variant.name], variant, longs, short, (384, 16), 1.0, args.slots
                )
                seconds[variant.name].append(probe["ttft_s"])
                print(f"{trial} {variant.name}: {probe['ttft_s']:.3f} s", flush=True)
    finally:
        for server in started.values():
            server.stop()
    results = {
        "machine": info,
        "setup": vars(args) | {"llama_server": str(args.llama_server)},
        "commands": servers.commands,
        "seconds": seconds,
        "summary": {name: quantiles(values) for name, values in seconds.items()},
    }
    write_results(args.stem, results, markdown)


def markdown(results: dict) -> str:
    setup = results["setup"]
    lines = [
        f"# The second user's first token, {setup['trials']} trials "
        f"({setup['slots'] - 1} long answers streaming; seed {setup['seed']})",
        "",
        f"{results['machine'].get('cpu', '')}; servers started once, probed in a shuffled "
        "order each trial.",
        "",
        "| variant | min s | p10 s | median s | max s |",
        "|---|---|---|---|---|",
    ]
    for name, values in results["seconds"].items():
        q = results["summary"][name]
        lines.append(
            f"| {name} | {q['min']:.3f} | {q['p10']:.3f} | {q['median']:.3f} | {max(values):.3f} |"
        )
    lines += ["", "Commands:", ""] + [f"- {k}: `{v}`" for k, v in results["commands"].items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
