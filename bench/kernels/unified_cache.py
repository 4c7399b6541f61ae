"""Can the server's slots share ONE unified KV cache and stay exact? Rows and step costs.

With a cache of its own per sequence (``unified=False``, the slots on a stock build) llama.cpp
splits a call into micro-batches with as many tokens of each sequence (``split_equal``):
requests' blocks of unequal lengths take several passes over the weights where a unified cache
takes one. This measures, on the loaded build, the two things that decide whether a unified cache
can replace them:

- ``rows``: streams of random tokens (``--lengths``, three of them) fed on sequences of one
  context in shared calls (0-12 next tokens of each, in a random order of sequences), each row
  compared bitwise with the stream's rows on a context of its own (the same attention setting).
  Three layouts: cells per sequence, flash attention off; a unified cache with flash attention;
  the same with every stream's piece followed by 0-6 rejected tokens that are then dropped
  (``forget``), as speculation does, leaving holes other sequences' cells may fill.
- ``cost``: one step's seconds for mixes of single rows, blocks and a prompt chunk, four
  sequences each holding 200 tokens, per-sequence cells without flash attention against a
  unified cache with it (medians of ``--repeats``, alternating).

Stock flash attention tiles several rows and splits a row's cells among threads, and stock
``find_slot`` may put a sequence's tokens in holes before its own cells; the exact-rows build
(patch items 5 and 6) computes each row as alone over the cells in their order and keeps each
sequence's cells in order, which is what the slots use. Earlier probes pointed
``LLAMA_CPP_LIB_PATH`` at builds with only the first of the two
(``bench/results/unified_cache_probe.md``):

    python bench/kernels/unified_cache.py --stem unified_cache_ordered
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.machine import machine
from bench.lib.results import write_results
from spec_decode.backends import assembly, registry
from spec_decode.backends.llamacpp.context import LlamaContext, Row
from spec_decode.backends.llamacpp.exact_rows import shared_call_mismatches
from spec_decode.backends.llamacpp.kernels import kernels_status

#: (unified, flash attention, rejected tokens dropped) per layout of the rows part.
LAYOUTS = {
    "cells per sequence": (False, False, False),
    "unified, flash attention": (True, True, False),
    "unified, flash attention, drops": (True, True, True),
}
#: Rows each of four sequences feeds in one step of the cost part.
MIXES = {
    "4 single rows": (1, 1, 1, 1),
    "3 single rows + 61-token prompt chunk": (1, 1, 1, 61),
    "blocks 1, 5, 1, 3": (1, 5, 1, 3),
    "blocks 4, 4, 4, 4": (4, 4, 4, 4),
    "blocks 1, 1, 1, 16": (1, 1, 1, 16),
}
#: Tokens each sequence holds before a timed step.
HELD = 200


def step_seconds(model: Path, repeats: int) -> dict[str, dict[str, float]]:
    """Median seconds of one step per mix: per-sequence cells against a unified cache."""
    contexts = {
        "cells per sequence": LlamaContext(
            model, n_threads=2, n_ctx=1024, n_seq=4, unified=False, flash_attention=False
        ),
        "unified, flash attention": LlamaContext(
            model, n_threads=2, n_ctx=4096, n_seq=4, unified=True, flash_attention=True
        ),
    }
    times: dict[str, dict[str, list[float]]] = {m: {k: [] for k in contexts} for m in MIXES}
    held = [Row(42, p, (s,), p == HELD - 1) for s in range(4) for p in range(HELD)]
    for _ in range(repeats):
        for mix, counts in MIXES.items():
            for name, context in contexts.items():
                for seq in range(4):
                    context.forget(seq)
                context.decode(held)
                rows = [
                    Row(43, HELD + i, (s,), True) for s, n in enumerate(counts) for i in range(n)
                ]
                started = time.perf_counter()
                context.decode(rows)
                times[mix][name].append(time.perf_counter() - started)
    for context in contexts.values():
        context.close()
    return {mix: {k: statistics.median(v) for k, v in by.items()} for mix, by in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="GGUF (default: the packaged target)")
    parser.add_argument("--lengths", default="280,400", help="streams' lengths drawn in this range")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--stem", default="unified_cache")
    args = parser.parse_args()
    model = Path(args.model or assembly.gguf_file(registry.DEFAULT_TARGET))
    low, high = (int(n) for n in args.lengths.split(","))
    rng = np.random.default_rng(100 + args.seed)
    streams = [rng.integers(3, 1000, size=int(rng.integers(low, high))).tolist() for _ in "abc"]
    rows = {}
    for name, (unified, flash, drops) in LAYOUTS.items():
        differing = shared_call_mismatches(
            model, streams, args.seed, most=12, unified=unified, flash_attention=flash,
            drop_tails=drops,
        )  # fmt: skip
        rows[name] = [len(d) for d in differing]
        print(f"{name}: rows differing {rows[name]}", flush=True)
    results = {
        "machine": machine(),
        "build": kernels_status(),
        "setup": vars(args) | {"lengths": [len(s) for s in streams]},
        "differing_rows": rows,
        "step_seconds": step_seconds(model, args.repeats),
    }
    write_results(args.stem, results, markdown)


def markdown(results: dict) -> str:
    setup = results["setup"]
    lines = [
        "## A unified KV cache for the slots? "
        f"(`python bench/kernels/unified_cache.py --stem {setup['stem']}`)\n",
        f"{results['machine']['cpu']}; {results['build']}.\n",
        f"Rows differing bitwise from solo rows, streams of {setup['lengths']} tokens "
        "in shared calls:\n",
        "| layout | differing rows per stream |\n|---|---|",
        *(f"| {name} | {rows} |" for name, rows in results["differing_rows"].items()),
        f"\nOne step, four sequences holding {HELD} tokens, medians of {setup['repeats']}:\n",
        "| rows per sequence | cells per sequence (ms) | unified, flash attention (ms) | ratio |",
        "|---|---|---|---|",
    ]
    for mix, by in results["step_seconds"].items():
        own, unified = by["cells per sequence"], by["unified, flash attention"]
        lines.append(f"| {mix} | {1e3 * own:.0f} | {1e3 * unified:.0f} | {own / unified:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
