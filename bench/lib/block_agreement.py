"""How a transformers model's block scores differ from its one-token scores along a greedy
continuation: what greedy identity rests on where the backend states no tolerance (CUDA)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from spec_decode.backends.transformers import TransformersModel


@contextmanager
def raw_block_rows(model: TransformersModel) -> Iterator[None]:
    """Near-tie re-scoring off while measuring: on the CPU the backend replaces near-tied block
    rows by target-only's, which would hide the very difference being measured (on CUDA it is
    off anyway)."""
    before = getattr(model, "exact_ties", None)
    if before is not None:
        model.exact_ties = False
    try:
        yield
    finally:
        if before is not None:
            model.exact_ties = before


def block_agreement(
    model: TransformersModel, prompt: list[int], continuation: list[int], blocks: Sequence[int]
) -> dict[str, dict[str, float]]:
    """How block scores differ from one-token scores along ``continuation`` after ``prompt``,
    for each drafted block length in ``blocks`` (keyed by it as a string).

    One-token rows are target-only decoding's (the prompt in one call, then one token per call);
    block rows are those of a speculative run that accepts everything: the prompt in one call,
    then passes of the last committed token plus ``block`` drafted tokens. Each pass's rows are
    compared with the one-token rows of the same positions: the largest |difference| of
    probabilities, the largest shift of a difference of two log-probabilities (equal to that of
    two logits, which the CPU backend's ``BLOCK_TOLERANCE`` bounds) and how many rows change
    their argmax.
    """
    n = len(continuation)
    figures = {}
    with raw_block_rows(model):
        model.reset()
        singles = np.array([model.next_dist(prompt + continuation[:i]) for i in range(n + 1)])
        for block in blocks:
            model.reset()
            model.next_dist(prompt)
            max_prob = max_shift = 0.0
            flips = rows = 0
            for start in range(0, n, block):
                drafted = continuation[start : start + block]
                scored = model.score(prompt + continuation[:start], drafted)
                alone = singles[start : start + len(drafted) + 1]
                max_prob = max(max_prob, float(np.abs(scored - alone).max()))
                with np.errstate(divide="ignore", invalid="ignore"):
                    shift = np.log(scored) - np.log(alone)
                for row in shift:
                    finite = row[np.isfinite(row)]
                    if finite.size:
                        max_shift = max(max_shift, float(finite.max() - finite.min()))
                flips += int((scored.argmax(axis=1) != alone.argmax(axis=1)).sum())
                rows += len(scored)
            figures[str(block)] = {
                "rows": rows,
                "max_abs_prob": max_prob,
                "max_logit_shift": max_shift,
                "flips": flips,
            }
    model.reset()
    return figures
