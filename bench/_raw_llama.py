"""The one raw ``llama_decode`` call the kernel benchmarks share: a sequence's tokens from a given
position, logits for every row.

It imports llama-cpp-python alone, never spec_decode: these scripts measure whichever llama.cpp
build ``LLAMA_CPP_LIB_PATH`` names, and importing spec_decode first could load another one.
"""

from __future__ import annotations

from collections.abc import Sequence

import llama_cpp


def decode_rows(
    ctx: object, batch: object, tokens: Sequence[int], first_position: int, every_row: bool = True
) -> None:
    """Feed ``tokens`` (sequence 0) at positions ``first_position``, ... in one call, asking for
    every row's logits (the last row's only, without ``every_row``); ``batch`` must hold at
    least ``len(tokens)`` rows."""
    batch.n_tokens = len(tokens)
    for i, token in enumerate(tokens):
        batch.token[i] = token
        batch.pos[i] = first_position + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = every_row or i == len(tokens) - 1
    status = llama_cpp.llama_decode(ctx, batch)
    if status != 0:
        raise RuntimeError(f"llama_decode failed with status {status}")
