"""Where a block's time goes, op by op: wall time of each graph node of one ``llama_decode`` of B
tokens, summed by (op, weight type, node name), for the llama.cpp build ``LLAMA_CPP_LIB_PATH``
names.

An eval callback (``cb_eval``) that asks for every node makes llama.cpp's scheduler compute the
graph one node at a time, so the time between the callback's two calls for a node is that node's
(its thread-pool start included: compare builds with each other, not with an undisturbed pass).
After a prompt of ``--context`` tokens the block is decoded ``--reps`` times (the first not
counted), removed from the cache each time.

    LLAMA_CPP_LIB_PATH=$LIB python bench/kernels/kernels_op_times.py MODEL.gguf --block 16 \\
        --json out.json
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.ggml import GgmlTensor, ggml_base, library_folder
from spec_decode.backends.llamacpp.library import llama_cpp
from spec_decode.backends.llamacpp.raw import RawContext


class OpClock:
    """cb_eval: while ``on``, add each node's compute time to ``seconds[(op, type, name)]``."""

    def __init__(self) -> None:
        self.on = False
        self.seconds: collections.Counter = collections.Counter()
        self._started = 0.0
        self.cb = llama_cpp.ggml_backend_sched_eval_callback(self._cb)

    def _cb(self, tensor, ask, _user):
        if not self.on:
            return not ask
        if ask:
            self._started = time.perf_counter()
            return True
        elapsed = time.perf_counter() - self._started
        node = ctypes.cast(tensor, ctypes.POINTER(GgmlTensor)).contents
        op = ggml_base().ggml_op_desc(ctypes.byref(node)).decode()
        weights = node.src[0].contents.type if node.src[0] else None
        kind = "-" if weights is None else ggml_base().ggml_type_name(weights).decode()
        name = node.name.decode().split("-")[0]  # "ffn_out-12" -> "ffn_out"
        self.seconds[(op, kind, "node" if name.startswith("node_") else name)] += elapsed
        return True


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--block", type=int, default=16)
    ap.add_argument("--context", type=int, default=48)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--top", type=int, default=12, help="ops printed")
    ap.add_argument("--json")
    args = ap.parse_args()

    clock = OpClock()
    cells = args.context + args.block
    raw = RawContext(args.model, n_ctx=cells, threads=args.threads, eval_callback=clock.cb)
    tokens = np.random.default_rng(0).integers(100, 30000, args.context + args.block).tolist()
    raw.decode(tokens[: args.context], 0)
    totals = []
    for rep in range(args.reps):
        raw.forget_from(args.context)
        clock.on = rep > 0  # the first repetition warms up
        started = time.perf_counter()
        raw.decode(tokens[args.context :], args.context)
        if rep > 0:
            totals.append(time.perf_counter() - started)
    counted = args.reps - 1
    per_op = sorted(((1000 * s / counted, key) for key, s in clock.seconds.items()), reverse=True)
    lib = library_folder()
    print(f"build: {lib}\nblock {args.block}: {1000 * statistics.median(totals):.1f} ms a pass")
    for ms, (op, kind, name) in per_op[: args.top]:
        print(f"  {ms:8.2f} ms  {op:10s} {kind:6s} {name}")
    if args.json:
        result = {
            "build": lib,
            "block": args.block,
            "context": args.context,
            "threads": args.threads,
            "pass_ms_median": 1000 * statistics.median(totals),
            "ms_per_pass": [
                {"op": op, "type": kind, "name": name, "ms": ms} for ms, (op, kind, name) in per_op
            ],
        }
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
