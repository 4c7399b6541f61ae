"""Bitwise rows of calls several requests share, on the packaged target (or any GGUF).

Streams of random tokens (``--streams`` of 60 to 160 tokens) are fed on sequences of one unified
llama.cpp cache, as the server's slots share one, each call taking 0 to ``--most`` next tokens of
each stream in a random order of sequences (prompt chunks and verification blocks alike; 4 x 16
keeps a call within the slots' 64-token budget), and every row is compared bitwise with the
stream's rows on a context of its own (target-only decoding's calls):
:func:`spec_decode.backends.llamacpp.exact_rows.shared_call_mismatches`. One schedule per
``--seeds``, then the negative control: the first seed's schedule with flash attention off, where
attention sums over every cell of the cache, other sequences' included (masked), in an order
they change.

    python bench/kernels/shared_calls.py --out bench/results/shared_calls.json
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from spec_decode.backends import assembly, registry
from spec_decode.backends.llamacpp.exact_rows import shared_call_mismatches
from spec_decode.backends.llamacpp.kernels import kernels_status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="GGUF (default: the packaged target)")
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--most", type=int, default=16, help="tokens of a stream a call takes")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    model = args.model or str(assembly.gguf_file(registry.DEFAULT_TARGET))
    vocab = _vocab_size(model)
    runs = []
    seeds = [int(s) for s in args.seeds.split(",")]
    for seed, flash_attention in [*((s, None) for s in seeds), (seeds[0], False)]:
        rng = np.random.default_rng(1000 + seed)
        streams = [
            rng.integers(3, vocab, size=int(rng.integers(60, 161))).tolist()
            for _ in range(args.streams)
        ]
        started = time.perf_counter()
        differing = shared_call_mismatches(
            model,
            streams,
            seed,
            most=args.most,
            unified=True,
            threads=args.threads,
            flash_attention=flash_attention,
        )
        runs.append({
            "seed": seed,
            "attention": "flash, as the server" if flash_attention is None else "flash off",
            "rows": [len(s) for s in streams],
            "differing_rows": [len(d) for d in differing],
            "seconds": round(time.perf_counter() - started, 1),
        })  # fmt: skip
        print(json.dumps(runs[-1]), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({
                "model": os.path.basename(model),
                "status": kernels_status(),
                "streams": args.streams,
                "most": args.most,
                "runs": runs,
            }, f, indent=1)  # fmt: skip


def _vocab_size(model: str) -> int:
    from spec_decode.backends.llamacpp.raw import RawContext

    with RawContext(model, n_ctx=8, threads=1) as raw:
        return raw.n_vocab


if __name__ == "__main__":
    main()
