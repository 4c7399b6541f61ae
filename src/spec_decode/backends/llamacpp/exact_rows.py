"""Check, bitwise, that a llama.cpp build scores every row of a block like a token scored alone.

:func:`row_mismatches` reads a prompt in one call, scores the next ``max(blocks)`` tokens one at a
time (the reference rows: what target-only decoding computes), then, for each block size B, reads
the same prompt afresh and scores the first B of those tokens in ONE ``llama_decode``; each of the B
rows of logits is compared with its reference row as raw float32 bits. The prompt is read the same
way both times, so only the block's own kernels can make a row differ.

Used by the tests (tiny GGUFs of each covered K-quant and IQ4_XS), by
``bench/kernels/kernels_exact_rows.py`` (the packaged target) and by the builder. Runs against
whichever libraries llama-cpp-python loaded (``LLAMA_CPP_LIB_PATH``);
``python -m spec_decode.backends.llamacpp.exact_rows MODEL`` prints the result as JSON, so a check
of another build runs in a subprocess.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from spec_decode.backends.llamacpp.raw import RawContext


def row_mismatches(
    model_path: str | Path,
    blocks: Sequence[int] = tuple(range(1, 65)),
    prompt_len: int = 48,
    threads: int = 2,
    seed: int = 0,
    token_range: tuple[int, int] | None = None,
    flash_attention: bool = False,
) -> dict[int, dict]:
    """For each block size B: ``{"rows": [indices of rows that differ], "max_abs_diff": float}``.

    Tokens are drawn at random (``seed``) from ``token_range`` (default: the whole vocabulary
    except its first 3 ids). Flash attention is off, as in the backend; ``flash_attention``
    turns it on, which tiles the keys differently for several query rows than for one once the
    cache passes 256 cells: the check's negative control on a build whose kernels are exact.
    """
    longest = max(blocks)
    n_ctx = prompt_len + longest + 1
    with RawContext(
        model_path, n_ctx=n_ctx, threads=threads, flash_attention=flash_attention
    ) as raw:
        low, high = token_range or (3, raw.n_vocab)
        tokens = np.random.default_rng(seed).integers(low, high, size=prompt_len + longest)
        tokens = tokens.tolist()
        raw.decode(tokens[:prompt_len], 0)
        reference = np.concatenate(
            [raw.decode([tokens[prompt_len + i]], prompt_len + i) for i in range(longest)]
        )
        result = {}
        for size in blocks:
            raw.forget_from(0)
            raw.decode(tokens[:prompt_len], 0)
            rows = raw.decode(tokens[prompt_len : prompt_len + size], prompt_len)
            same = (rows.view(np.uint32) == reference[:size].view(np.uint32)).all(axis=1)
            result[size] = {
                "rows": [int(i) for i in np.flatnonzero(~same)],
                "max_abs_diff": float(np.abs(rows - reference[:size]).max()),
            }
        return result


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--blocks", default="1-64", help="e.g. 1-64 or 1,2,4,8")
    parser.add_argument("--prompt-len", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if "-" in args.blocks:
        lo, hi = (int(v) for v in args.blocks.split("-"))
        blocks = list(range(lo, hi + 1))
    else:
        blocks = [int(v) for v in args.blocks.split(",")]
    from spec_decode.backends.llamacpp.kernels import patched_exact_rows

    result = row_mismatches(args.model, blocks, args.prompt_len, args.threads, args.seed)
    json.dump({"exact_rows_build": patched_exact_rows(), "blocks": result}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
