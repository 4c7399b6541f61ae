"""Check, bitwise, that a llama.cpp build scores every row of a block like a token scored alone,
and every row of a call several sequences share like the sequence's own rows alone.

:func:`row_mismatches` reads a prompt in one call, scores the next ``max(blocks)`` tokens one at a
time (the reference rows: what target-only decoding computes), then, for each block size B, reads
the same prompt afresh and scores the first B of those tokens in ONE ``llama_decode``; each of the B
rows of logits is compared with its reference row as raw float32 bits. The prompt is read the same
way both times, so only the block's own kernels can make a row differ.

:func:`shared_call_mismatches` feeds several token streams on sequences of one context, each call
taking a random share of each (prompt chunks and blocks alike, in a random order of sequences, as
the server's slots do), and compares every row with the stream's rows on a context of its own.

Used by the tests (tiny GGUFs of each covered K-quant and IQ4_XS), by
``bench/kernels/kernels_exact_rows.py`` and ``bench/kernels/shared_calls.py`` (the packaged
target) and by the builder. Runs against whichever libraries llama-cpp-python loaded
(``LLAMA_CPP_LIB_PATH``); ``python -m spec_decode.backends.llamacpp.exact_rows MODEL`` prints
:func:`row_mismatches` as JSON, so a check of another build runs in a subprocess.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from spec_decode.backends.llamacpp.context import LlamaContext, Row
from spec_decode.backends.llamacpp.raw import RawContext


def row_mismatches(
    model_path: str | Path,
    blocks: Sequence[int] = tuple(range(1, 65)),
    prompt_len: int = 48,
    threads: int = 2,
    seed: int = 0,
    token_range: tuple[int, int] | None = None,
    flash_attention: bool | None = None,
) -> dict[int, dict]:
    """For each block size B: ``{"rows": [indices of rows that differ], "max_abs_diff": float}``.

    Tokens are drawn at random (``seed``) from ``token_range`` (default: the whole vocabulary
    except its first 3 ids). Flash attention is as in the backend unless ``flash_attention``
    says (:class:`~.raw.RawContext`).
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
            same = bitwise_equal_rows(rows, reference[:size])
            result[size] = {
                "rows": [int(i) for i in np.flatnonzero(~same)],
                "max_abs_diff": float(np.abs(rows - reference[:size]).max()),
            }
        return result


#: The most rejected tokens a piece carries with ``drop_tails`` (:func:`shared_call_mismatches`).
_MOST_REJECTED = 6


def shared_call_mismatches(
    model_path: Path,
    streams: Sequence[Sequence[int]],
    seed: int,
    *,
    most: int = 24,
    unified: bool = False,
    threads: int = 2,
    flash_attention: bool | None = None,
    drop_tails: bool = False,
) -> list[list[int]]:
    """Per stream, the indices of its rows that differ bitwise from :func:`solo_rows`, when the
    streams are fed on sequences of one context (cells of their own, unless ``unified``): each
    call takes 0 to ``most`` next tokens of each stream, sequences in a random order (``seed``).
    With ``drop_tails`` each stream's piece is followed by 0 to :data:`_MOST_REJECTED` tokens
    dropped after the call, as speculation drops rejected drafts, leaving holes in the cache."""
    window = max(map(len, streams)) + 1 + _MOST_REJECTED * drop_tails
    cells = window * len(streams) if unified else window  # a unified cache holds them all
    context = LlamaContext(
        Path(model_path), n_threads=threads, n_ctx=cells, n_seq=len(streams), unified=unified,
        flash_attention=flash_attention,
    )  # fmt: skip
    try:
        shared = _shared_rows(context, streams, np.random.default_rng(seed), most, drop_tails)
    finally:
        context.close()
    differing = [
        ~bitwise_equal_rows(got, solo_rows(model_path, stream, threads, flash_attention))
        for got, stream in zip(shared, streams, strict=True)
    ]
    return [[int(i) for i in np.flatnonzero(rows)] for rows in differing]


def solo_rows(
    model_path: Path, stream: Sequence[int], threads: int = 2, flash_attention: bool | None = None
) -> np.ndarray:
    """The stream's rows on a context of its own: one call for the first 8 tokens, then one
    token a call (target-only decoding's calls)."""
    context = LlamaContext(
        Path(model_path), n_threads=threads, n_ctx=len(stream) + 1, flash_attention=flash_attention
    )
    try:
        rows = [context.decode([Row(t, i, (0,), True) for i, t in enumerate(stream[:8])]).copy()]
        rows += [
            context.decode([Row(t, i, (0,), True)]).copy()
            for i, t in enumerate(stream[8:], start=8)
        ]
        return np.concatenate(rows)
    finally:
        context.close()


def _shared_rows(
    context: LlamaContext,
    streams: Sequence[Sequence[int]],
    rng: np.random.Generator,
    most: int,
    drop_tails: bool = False,
) -> list[np.ndarray]:
    """Every stream's rows of logits, fed on sequence ``i`` of ``context`` in shared calls
    (with ``drop_tails``, each piece followed by tokens dropped after the call)."""
    fed = [0] * len(streams)
    rows: list[list[np.ndarray]] = [[] for _ in streams]
    while any(f < len(s) for f, s in zip(fed, streams, strict=True)):
        batch, owners, dropping = [], [], []
        for seq in map(int, rng.permutation(len(streams))):
            take = min(int(rng.integers(0, most + 1)), len(streams[seq]) - fed[seq])
            batch += [
                Row(streams[seq][i], i, (seq,), True) for i in range(fed[seq], fed[seq] + take)
            ]
            owners += [seq] * take
            fed[seq] += take
            if drop_tails and take:
                tail = rng.choice(streams[seq], size=int(rng.integers(0, _MOST_REJECTED + 1)))
                batch += [Row(int(t), fed[seq] + j, (seq,), True) for j, t in enumerate(tail)]
                owners += [-1] * len(tail)
                if len(tail):
                    dropping.append(seq)
        if batch:
            for owner, logits in zip(owners, context.decode(batch), strict=True):
                if owner >= 0:
                    rows[owner].append(logits.copy())
            for seq in dropping:
                context.forget(seq, fed[seq])
    return [np.array(r) for r in rows]


def bitwise_equal_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row, whether every float32 of ``a`` has the bits of ``b``'s."""
    return (a.view(np.uint32) == b.view(np.uint32)).all(axis=1)


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
