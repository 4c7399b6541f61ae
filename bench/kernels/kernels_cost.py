"""Cost of scoring a block of B tokens in one llama_decode, in one-token passes.

After a prompt of --context tokens, each block of B tokens (logits for every row, as the backend
asks) is decoded, timed and removed again with llama_memory_seq_rm; medians over --reps, blocks
interleaved so that machine noise hits every size alike.  Which llama.cpp build runs is
LLAMA_CPP_LIB_PATH's (llama-cpp-python's own libraries when unset).

    python bench/kernels/kernels_cost.py MODEL.gguf --blocks 1,2,4,8,16,32,48 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.ggml import library_folder
from spec_decode.backends.llamacpp.raw import RawContext


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--blocks", default="1,2,3,4,8,16,32,48")
    ap.add_argument("--context", type=int, default=48)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--label", default="")
    ap.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: process CPU time (meaningful with --threads 1 on a loaded machine)",
    )
    ap.add_argument(
        "--flash-attn",
        choices=("off", "on"),
        default="off",
        help="on: llama.cpp's flash attention (llama-server's default resolves to it on CPU)",
    )
    ap.add_argument(
        "--last-row-only",
        action="store_true",
        help="logits of each block's last row only (as llama-bench's pp), not of every row",
    )
    ap.add_argument("--json")
    args = ap.parse_args()
    blocks = [int(b) for b in args.blocks.split(",")]
    raw = RawContext(
        args.model,
        n_ctx=max(512, args.context + max(blocks)),
        threads=args.threads,
        flash_attention=args.flash_attn == "on",
    )
    rng = np.random.default_rng(0)
    toks = rng.integers(100, 30000, size=args.context + max(blocks)).tolist()

    def decode(ts, pos0):
        raw.decode(ts, pos0, every_row=not args.last_row_only)

    decode(toks[: args.context], 0)
    times = {b: [] for b in blocks}
    cpu = {b: [] for b in blocks}  # process CPU time: robust to other load with --threads 1
    for b in blocks:  # warm-up
        decode(toks[args.context : args.context + b], args.context)
        raw.forget_from(args.context)
    for _ in range(args.reps):
        for b in blocks:
            t0, c0 = time.perf_counter(), time.process_time()
            decode(toks[args.context : args.context + b], args.context)
            times[b].append(time.perf_counter() - t0)
            cpu[b].append(time.process_time() - c0)
            raw.forget_from(args.context)
    clock = cpu if args.clock == "cpu" else times
    med = {b: statistics.median(v) for b, v in clock.items()}
    one = med[blocks[0]] if blocks[0] == 1 else None
    print(f"build: {library_folder()} {args.label}")
    for b in blocks:
        rel = f"{med[b] / one:6.2f}x" if one else ""
        print(f"  B={b:3d}  {1000 * med[b]:8.1f} ms  {rel}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "label": args.label,
                    "lib": library_folder(),
                    "env": {k: v for k, v in os.environ.items() if k.startswith("GGML")},
                    "clock": args.clock,
                    "median_s": med,
                    "min_s": {b: min(v) for b, v in clock.items()},
                    "all_wall_s": times,
                    "all_cpu_s": cpu,
                    "context": args.context,
                    "threads": args.threads,
                    "flash_attn": args.flash_attn,
                    "every_row": not args.last_row_only,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
