"""Which drafted block size is exact for one loaded model on this llama.cpp build, and why.

A build's exactness is a property of its kernels, and a kernel is chosen per weight type: the
exact-rows build (``spec-decode build-kernels``) makes the kernels of :data:`COVERED_TYPES`
compute a block's rows bitwise like one-token rows, while other types (the IQ1-IQ3 families, for
one) keep kernels that sum the rows of a block of 8 or more in another order. So the promise is
made per model, in two steps:

1. the claim: the build's block size where every weight type of the file is covered, else
   :data:`UNCOVERED_BLOCK` (on a stock build, its own small size whatever the types);
2. the check: a block of each size where this llama.cpp switches kernels for the model's weight
   types (:func:`check_ladder`), up to the claim, is scored on the model's own weights and
   compared bitwise with one-token rows (:func:`checked_block_size`); the size used is the
   largest before the first that differs.
   Longer blocks run the loops of the longest size checked, and every covered type is checked
   at every size up to 64 by the per-type table and the tests, so the check stays short: it
   runs once per model, the first time it is loaded.

The result is cached by the file's fingerprint, the build and the CPU's flags
(:func:`exact_rows`), so each model is checked once per machine.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from spec_decode.backends.cache import atomic_write_text, cache_root
from spec_decode.backends.llamacpp.exact_rows import bitwise_equal_rows
from spec_decode.backends.llamacpp.gguf_header import fingerprint, weight_types
from spec_decode.backends.llamacpp.isa import AVX512_FLAGS, AVX512_VNNI_FLAG, cpu_flags, isa_level
from spec_decode.backends.llamacpp.kernels import (
    build_identity,
    exact_block_size,
    patched_exact_rows,
)
from spec_decode.backends.llamacpp.library import load, own_library_folder

#: Weight types whose rows the exact-rows build computes alike at every block size up to 64,
#: each checked on the packaged target requantized to it (blocks of 1-4, 8, 16, 32 and 64:
#: ``bench/kernels/exact_rows_by_type.py``, ``bench/results/exact_rows_by_type.json``). The
#: K-quants and IQ4_XS by the patch; F16, BF16, Q8_0, Q5_0 and Q4_0 (where not repacked) take
#: tinyBLAS, and Q4_1 and Q5_1 one vec_dot, at every row count.
COVERED_TYPES = frozenset(
    {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"}
    | {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS"}
)
#: The claim for a model with a weight type outside :data:`COVERED_TYPES`: below 8 rows every
#: type takes its one-row kernel, so short blocks may hold; the check says how many do.
UNCOVERED_BLOCK = 4
#: Block sizes checked on the way up to the claim, one for each kernel a call of that many rows
#: takes here (x86): below 4 rows the one-row kernels (the repacked types' GEMV; on AVX-512 VNNI
#: the patch's Q4_K kernel scores 2 and 3 rows in passes of their own), from 4 the repacked
#: GEMM's 4-row loop, from 8 the tiled kernels, from 16 the repacked GEMM's 16-row loop.
_LADDER = (2, 3, 4, 8, 16)
#: The rungs of the repacked kernels' loops, checked only where a weight type may be repacked.
_REPACKED_RUNGS = (3, 4, 16)
#: The rungs of the patch's Q6_K kernel on AVX-512 VNNI, checked where a model has Q6_K weights:
#: it scores 1, 2, 3 or 4 rows in passes of their own below 48 rows, the tiled kernel from 48.
_Q6_K_VNNI_RUNGS = (3, 4, 48)
_Q6_K_VNNI_FLAGS = AVX512_FLAGS | {AVX512_VNNI_FLAG}
#: Weight types llama.cpp repacks for its GEMM on x86 (``ggml-cpu/repack.cpp``: Q4_0, Q4_K, IQ4_NL
#: and MXFP4 from AVX2, Q2_K from AVX-512); other architectures repack more types.
X86_REPACKED_TYPES = frozenset({"Q4_0", "Q4_K", "IQ4_NL", "MXFP4", "Q2_K"})
#: Rows of each block compared with one-token rows: a kernel path is chosen for the whole call
#: and rows are grouped by 4 at most below 8, so the first two show it. Every row's logits are
#: computed all the same, as when a block is verified: llama.cpp runs the last layer's
#: feed-forward and the output layer on the rows asked for only, and those matrices (their
#: shapes, whether they were repacked) choose kernels of their own.
_COMPARED_ROWS = 2


@dataclass(frozen=True)
class ExactRows:
    """The block size the backend feeds for one model, and the evidence for it."""

    size: int  #: the longest block whose rows are bitwise one-token rows here
    build_size: int  #: what the build promises for covered weight types
    weight_types: tuple[str, ...]  #: the file's weight types
    uncovered: tuple[str, ...]  #: those outside :data:`COVERED_TYPES`
    checked: tuple[int, ...]  #: block sizes scored on the model's own weights
    differed: int | None  #: the block size whose rows differed, if one did

    @property
    def why(self) -> str:
        """One sentence: the size and the reason for it."""
        checked = ", ".join(map(str, self.checked)) or "none"
        if self.differed is not None:
            return (
                f"blocks of up to {self.size} tokens exact: rows of {self.differed}-token "
                f"blocks differ from one-token rows on this model's weights "
                f"({', '.join(self.uncovered) or 'its weight types'} on this build)"
            )
        if self.uncovered and self.size < self.build_size:
            return (
                f"blocks of up to {self.size} tokens exact: the exact-rows kernels do not cover "
                f"{', '.join(self.uncovered)} (checked bitwise on this model: {checked})"
            )
        longer = (
            f"; longer blocks take the {self.checked[-1]}-token block's kernels"
            if self.checked and self.size > self.checked[-1]
            else ""
        )
        return (
            f"blocks of up to {self.size} tokens exact (checked bitwise on this model: "
            f"{checked}{longer})"
        )

    def report(self) -> dict[str, object]:
        """The fields and :attr:`why`, for JSON output."""
        return {**asdict(self), "why": self.why}

    @property
    def reduced(self) -> bool:
        """Whether this model gets shorter blocks than the build promises for covered types."""
        return self.size < self.build_size


def claimed_block_size(types: Sequence[str], build_size: int, patched: bool) -> int:
    """The size to check up to: the build's own on a stock build or where every type is covered,
    else :data:`UNCOVERED_BLOCK` (never more than the build's)."""
    if not patched or set(types) <= COVERED_TYPES:
        return build_size
    return min(build_size, UNCOVERED_BLOCK)


def check_ladder(types: Sequence[str], flags: frozenset[str]) -> tuple[int, ...]:
    """The block sizes to check for a model of weight ``types`` on a CPU with ``flags``: the
    repacked GEMM's rungs only where one of the types may be repacked, every rung off x86 (or
    without AVX2), where the repacking rules differ; the Q6_K kernel's where it runs."""
    rungs = set(_LADDER)
    if isa_level(flags) is not None and not set(types) & X86_REPACKED_TYPES:
        rungs -= set(_REPACKED_RUNGS)
    if "Q6_K" in types and flags >= _Q6_K_VNNI_FLAGS:
        rungs |= set(_Q6_K_VNNI_RUNGS)
    return tuple(sorted(rungs))


#: ``decode(tokens, first_position)``: logits of every row of ``tokens`` fed in ONE call at
#: ``first_position`` on, after dropping every cached position from it.
Decode = Callable[[Sequence[int], int], np.ndarray]


def checked_block_size(
    decode: Decode,
    claim: int,
    n_vocab: int,
    ladder: Sequence[int] = _LADDER,
    seed: int = 0,
) -> tuple[int, tuple[int, ...], int | None]:
    """(size, sizes checked, the size that differed or None): scores blocks of random tokens of
    the sizes in ``ladder`` up to ``claim`` (the largest cut to the ladder's last), and compares
    the first rows of each bitwise with the same tokens scored one at a time. ``claim`` is the
    result where none differs."""
    top = min(claim, ladder[-1])
    sizes = tuple(s for s in ladder if s < top) + ((top,) if top > 1 else ())
    if not sizes:
        return claim, (), None
    tokens = np.random.default_rng(seed).integers(3, n_vocab, size=top).tolist()
    reference = np.concatenate([decode([tokens[i]], i) for i in range(min(top, _COMPARED_ROWS))])
    exact = 1
    for done, size in enumerate(sizes, start=1):
        rows = min(size, _COMPARED_ROWS)
        block = decode(tokens[:size], 0)[:rows]
        if not bitwise_equal_rows(block, reference[:rows]).all():
            return exact, sizes[:done], size
        exact = size
    return claim, sizes, None


def exact_rows(path: Path, decode: Decode, n_vocab: int, n_ctx: int) -> ExactRows:
    """The promise for the GGUF at ``path`` loaded in this process with a context of ``n_ctx``
    positions, from the cache when this file was checked on this build and CPU before, else
    claimed, checked with ``decode`` (on the loaded model itself) and cached. In a context too
    small for the whole check, the blocks that fit are checked and that result is not cached."""
    flags = cpu_flags()
    key = _cache_key(path, flags)
    cached = _read(key)
    if cached is not None:
        return cached
    build_size = exact_block_size()
    types = tuple(sorted(weight_types(path)))
    claim = claimed_block_size(types, build_size, patched=patched_exact_rows() > 0)
    ladder = check_ladder(types, flags)
    size, checked, differed = checked_block_size(decode, min(claim, n_ctx), n_vocab, ladder)
    if differed is None:
        size = claim  # a context too small to check the whole claim cannot hold such blocks
    result = ExactRows(
        size=size,
        build_size=build_size,
        weight_types=types,
        uncovered=tuple(t for t in types if t not in COVERED_TYPES),
        checked=checked,
        differed=differed,
    )
    if min(claim, ladder[-1]) <= n_ctx:  # the whole check fitted
        atomic_write_text(_cache_file(key), json.dumps(asdict(result)))
    return result


def _cache_key(path: Path, flags: frozenset[str]) -> str:
    """The file's fingerprint, the loaded libraries (their folder and each file's size and
    modification time: a rebuild changes it), the CPU's flags and the check itself (a changed
    check checks again)."""
    folder = load().folder or own_library_folder()
    libraries = (
        sorted(f"{f.name} {f.stat().st_size} {f.stat().st_mtime_ns}" for f in folder.glob("*.so*"))
        if folder
        else []
    )
    check = (
        f"ladder {_LADDER}, {_REPACKED_RUNGS} where {sorted(X86_REPACKED_TYPES)} on x86, "
        f"{_Q6_K_VNNI_RUNGS} for Q6_K on AVX-512 VNNI, rows {_COMPARED_ROWS} of all computed"
    )
    parts = [fingerprint(path), build_identity(), *libraries, " ".join(sorted(flags)), check]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _cache_file(key: str) -> Path:
    return cache_root() / "exact_rows" / f"{key}.json"


def _read(key: str) -> ExactRows | None:
    try:
        data = json.loads(_cache_file(key).read_text())
        return ExactRows(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})
    except (OSError, ValueError, TypeError):
        return None
