"""Is a KV cache reused across requests bitwise what a cold run computes? (llama.cpp backend)

A prefix of L tokens is read in one call (then, optionally, 3 tokens generated one at a time, as
a previous request leaves them); then a prompt of L + S tokens is read, either after
``keep_reusable`` (what the engine does) or from the raw cache (``--raw``: reuse all of the
prefix), and two greedy one-token steps follow. Every row (the prompt's last and the steps')
is compared bitwise with a cold read of the same prompt: ``=`` equal, ``x`` not.

    python bench/kernels/kv_reuse.py [--model qwen2.5-coder-1.5b] [--prefixes 8,13,16]
        [--suffixes 4,9,16] [--raw]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from spec_decode.backends.llamacpp import LlamaCppModel, load_tokenizer
from spec_decode.backends.loading import resolve_gguf


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--prefixes", default="8,13,16")
    parser.add_argument("--suffixes", default="4,9,16")
    parser.add_argument("--raw", action="store_true", help="reuse the whole cached prefix")
    args = parser.parse_args()
    model = LlamaCppModel(resolve_gguf(args.model), n_threads=2, n_ctx=512)
    text = (Path(__file__).resolve().parents[2] / "DESIGN.md").read_text()[:3000]
    seq = load_tokenizer(model).encode(text)[:200]
    print(f"invariant batch size {model.invariant_batch_size}", flush=True)

    def run(n: int, prefix: int | None = None, generated: int = 0) -> tuple[np.ndarray, int]:
        model.reset()
        kept = 0
        if prefix is not None:
            model.next_dist(seq[:prefix])
            for i in range(generated):
                model.next_dist(seq[: prefix + i + 1])
            kept = prefix + generated if args.raw else model.keep_reusable(seq[:n])
        rows, context = [model.next_dist(seq[:n])], seq[:n]
        for _ in range(2):
            context = [*context, int(rows[-1].argmax())]
            rows.append(model.next_dist(context))
        return np.stack(rows), kept

    cold: dict[int, np.ndarray] = {}
    for prefix in (int(a) for a in args.prefixes.split(",")):
        cells = []
        for suffix in (int(a) for a in args.suffixes.split(",")):
            n = prefix + suffix
            cold.setdefault(n, run(n)[0])
            for generated in (0, 3):
                warm, kept = run(n, prefix, generated)
                pairs = zip(warm, cold[n], strict=True)
                same = "".join("=" if (w == c).all() else "x" for w, c in pairs)
                cells.append(f"S={suffix} gen={generated} kept={kept}:{same}")
        print(f"L={prefix} " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
