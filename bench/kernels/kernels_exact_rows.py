"""Bitwise row check of a llama.cpp build on the packaged target (or any GGUF).

For B = 1..64 (``--blocks``): the rows of a block of B tokens scored in one call against the same
tokens scored one at a time, after a 48-token prompt; see
:mod:`spec_decode.backends.llamacpp.exact_rows`. The build that runs is the one spec-decode
loads (:mod:`spec_decode.backends.llamacpp.library`): the exact-rows build once built,
``SPEC_DECODE_KERNELS=stock`` for llama-cpp-python's own.

    spec-decode build-kernels
    python bench/kernels/kernels_exact_rows.py --out bench/results/kernels_exact_rows_patched.json
    SPEC_DECODE_KERNELS=stock python bench/kernels/kernels_exact_rows.py \\
        --out bench/results/kernels_exact_rows_stock.json
"""

from __future__ import annotations

import argparse
import json
import os
import time

from spec_decode.backends import assembly, registry
from spec_decode.backends.llamacpp.exact_rows import row_mismatches
from spec_decode.backends.llamacpp.kernels import kernels_status, patched_exact_rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None, help="GGUF (default: the packaged target)")
    parser.add_argument("--blocks", default="1-64")
    parser.add_argument("--prompt-len", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    model = args.model or str(assembly.gguf_file(registry.DEFAULT_TARGET))
    if "-" in args.blocks:
        lo, hi = (int(v) for v in args.blocks.split("-"))
        blocks = list(range(lo, hi + 1))
    else:
        blocks = [int(v) for v in args.blocks.split(",")]
    started = time.time()
    result = row_mismatches(model, blocks, args.prompt_len, args.threads, args.seed)
    exact = [b for b, r in result.items() if not r["rows"]]
    inexact = [b for b, r in result.items() if r["rows"]]
    print(kernels_status())
    print(f"blocks with every row bitwise equal to one-token rows: {exact}")
    print(f"blocks with differing rows: {inexact}")
    for b in inexact[:12]:
        print(
            f"  B={b}: rows {result[b]['rows'][:10]}{'...' if len(result[b]['rows']) > 10 else ''}"
            f" max |logit diff| {result[b]['max_abs_diff']:.3g}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {
                    "model": os.path.basename(model),
                    "status": kernels_status(),
                    "exact_rows_build": patched_exact_rows(),
                    "lib_path": os.environ.get("LLAMA_CPP_LIB_PATH"),
                    "prompt_len": args.prompt_len,
                    "threads": args.threads,
                    "seconds": round(time.time() - started, 1),
                    "blocks": result,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
