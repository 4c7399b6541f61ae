"""Cost curves of several llama.cpp builds, interleaved: one-token passes vs blocks of B tokens.

Runs ``bench/kernels/kernels_cost.py`` once per build per round, alternating builds (in reverse
order every other round), so that machine load hits each alike; writes every round's medians and a
summary (per build and block: the median over rounds of the per-round medians, and of the per-round
ratio to that round's one-token pass) to ``--out``.

    python bench/kernels/kernels_compare.py --build stock= --build patched=$HOME/.cache/.../lib \\
        --rounds 3 --out bench/results/kernels_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument(
        "--build",
        action="append",
        required=True,
        help="LABEL=LIB_DIR (empty LIB_DIR: llama-cpp-python's own libraries)",
    )
    ap.add_argument("--blocks", default="1,2,4,8,16,32,48", help="with 1: ratios are to it")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--context", type=int, default=48, help="cached tokens before each block")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument(
        "--flash-attn",
        choices=("off", "on"),
        default="off",
        help="on: flash attention, as spec-decode's backend runs on the exact-rows build",
    )
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if "1" not in args.blocks.split(","):
        ap.error("--blocks must include 1: every block's cost is given against the one-token pass")
    if args.model is None:
        from spec_decode.backends import assembly, registry

        args.model = str(assembly.gguf_file(registry.DEFAULT_TARGET))
    return args


def measure(args: argparse.Namespace, label: str, lib: str, round_: int) -> dict:
    """One round of one build: ``kernels_cost.py`` in a child process with that build's
    libraries, its medians and minima by block length."""
    env = {k: v for k, v in os.environ.items() if k != "LLAMA_CPP_LIB_PATH"}
    if lib:
        env["LLAMA_CPP_LIB_PATH"] = lib
    options = {
        "--blocks": args.blocks,
        "--context": str(args.context),
        "--reps": str(args.reps),
        "--threads": str(args.threads),
        "--label": label,
        "--clock": args.clock,
        "--flash-attn": args.flash_attn,
    }
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        started = time.time()
        subprocess.run(
            [sys.executable, str(HERE / "kernels_cost.py"), args.model]
            + [part for option in options.items() for part in option]
            + ["--json", tmp.name],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        data = json.loads(Path(tmp.name).read_text())
    return {
        "round": round_,
        "build": label,
        "lib": lib or None,
        "median_s": {int(k): v for k, v in data["median_s"].items()},
        "min_s": {int(k): v for k, v in data["min_s"].items()},
        "loadavg_1min": os.getloadavg()[0],
        "wall_s": round(time.time() - started, 1),
    }


def summarize(rounds: list[dict], labels: list[str]) -> dict[str, dict[int, dict[str, float]]]:
    """Per build and block: the median over rounds of the per-round medians (ms), and of the
    per-round ratio to that round's one-token pass."""
    summary = {}
    for label in labels:
        mine = [x for x in rounds if x["build"] == label]
        summary[label] = {
            b: {
                "ms": 1000 * statistics.median(x["median_s"][b] for x in mine),
                "x_one_token": statistics.median(x["median_s"][b] / x["median_s"][1] for x in mine),
            }
            for b in sorted(mine[0]["median_s"])
        }
    return summary


def main() -> None:
    args = parse_args()
    builds = [b.split("=", 1) for b in args.build]
    labels = [label for label, _ in builds]
    rounds: list[dict] = []
    for r in range(args.rounds):
        for label, lib in builds if r % 2 == 0 else builds[::-1]:  # no build always goes first
            rounds.append(measure(args, label, lib, r))
            med, load = rounds[-1]["median_s"], rounds[-1]["loadavg_1min"]
            print(
                f"round {r} {label:8s} load {load:5.1f}  "
                + "  ".join(
                    f"B={b}: {1000 * s:7.1f} ms ({s / med[1]:.2f}x)" for b, s in med.items()
                ),
                flush=True,
            )
    minima = {
        label: {
            b: min(x["min_s"][b] for x in rounds if x["build"] == label) for b in rounds[0]["min_s"]
        }
        for label in labels
    }
    summary = summarize(rounds, labels)
    result = {
        "model": os.path.basename(args.model),
        "threads": args.threads,
        "context": args.context,
        "reps": args.reps,
        "clock": args.clock,
        "flash_attn": args.flash_attn,
        "rounds": rounds,
        "summary": summary,
        "minimum_over_all_reps_s": minima,
    }
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({"summary": summary, "minimum_over_all_reps_s": minima}, indent=1))


if __name__ == "__main__":
    main()
