"""What this llama.cpp build computes and how its logits become probabilities: the build's
kernel features (which block sizes score bitwise equal to one token) and the one softmax every
row goes through; plus llama.cpp's log routing."""

from __future__ import annotations

import ctypes
import os
import re
import sys

import numpy as np

from spec_decode.backends.llamacpp.library import CHOICE_ENV, llama_cpp, load

#: Blocks no longer than this are bitwise equal to one-token scoring, by build (see above).
_EXACT_BLOCKS = {(False, False): 7, (False, True): 3}
#: Calls of at least this many rows compute each whole tile of that many rows from the call's
#: start bitwise the same whatever the call's length, by build: measured for the recommended
#: build only (without llamafile, with repack).
_INVARIANT_BATCHES = {(False, True): 8}
#: The most rows llama.cpp computes in one graph (``n_ubatch``): longer calls are split into
#: micro-batches of this many rows. Pinned, since row invariance was checked up to it.
MICRO_BATCH = 512


def build_features() -> dict[str, str]:
    """The CPU backend's build features as ``llama_print_system_info()`` reports them,
    e.g. ``{"AVX2": "1", "REPACK": "1", ...}`` (a feature built out is simply absent)."""
    info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    return dict(re.findall(r"([A-Z0-9_]+) = (\w+)", info))


def patched_exact_rows() -> int:
    """``spec_decode_exact_rows()`` of the llama.cpp libraries this process loaded: the block size
    up to which the exact-rows build (``spec-decode build-kernels``) scores rows bitwise equal to
    one-token rows; 0 on a stock build (no such symbol) or where its kernels are not covered."""
    function = getattr(llama_cpp.llama_cpp._lib, "spec_decode_exact_rows", None)
    if function is None:
        return 0
    function.restype, function.argtypes = ctypes.c_int, []
    return max(0, int(function()))


def ordered_cells() -> bool:
    """Whether the llama.cpp libraries this process loaded export ``spec_decode_ordered_cells``:
    the exact-rows build, which keeps each sequence's cells of a unified cache in the order of
    its positions and computes each query row's flash attention as alone over them, so that
    sequences sharing one unified cache get the rows each gets alone (the patch's items 5, 6)."""
    return getattr(llama_cpp.llama_cpp._lib, "spec_decode_ordered_cells", None) is not None


def flash_attention_type(asked: bool | None = None) -> int:
    """llama.cpp's flash-attention setting for a new context: as ``asked``; by default on where
    this build computes each row's flash attention as alone (:func:`ordered_cells`), off
    elsewhere, since stock flash attention tiles the keys differently for several query rows than
    for one once the cache passes 256 cells (0.3 in a logit at 258 tokens)."""
    on = ordered_cells() if asked is None else asked
    return int(
        llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if on else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    )


def stop_callback() -> object | None:
    """The exact-rows build's ``spec_decode_stop_requested`` as llama.cpp's abort callback type:
    true once the int its data points to is nonzero, read in C (llama.cpp polls it after every
    graph node, where a callback into Python would take the interpreter's lock); None on a stock
    build, where calls cannot be interrupted."""
    function = getattr(llama_cpp.llama_cpp._lib, "spec_decode_stop_requested", None)
    if function is None:
        return None
    return llama_cpp.ggml_abort_callback(ctypes.cast(function, ctypes.c_void_p).value)


def exact_block_size() -> int:
    """The longest block whose rows this llama.cpp build computes bitwise equal to one-token
    scoring: what the exact-rows build reports (64) when that build is loaded, else by stock
    build features: 7 without llamafile and repack kernels, 3 without llamafile but with repack,
    else 1 (only one-token passes)."""
    rows = patched_exact_rows()
    if rows:
        return rows
    features = build_features()
    return _EXACT_BLOCKS.get(("LLAMAFILE" in features, "REPACK" in features), 1)


def kernels_status() -> str:
    """One sentence on which llama.cpp build this process runs and what it guarantees."""
    chosen = load()
    where = f"{chosen.folder or 'llama-cpp-python own libraries'}; {chosen.origin}"
    rows = patched_exact_rows()
    if rows:
        return f"exact-rows llama.cpp build ({where}): blocks of up to {rows} tokens exact"
    if os.environ.get(CHOICE_ENV, "").lower() == "stock":
        hint = f"{CHOICE_ENV}=stock chose it"
    else:
        hint = "`spec-decode build-kernels` builds the exact-rows kernels"
    return (
        f"stock llama.cpp build ({where}): blocks of up to {exact_block_size()} tokens exact; "
        f"{hint}"
    )


def build_identity() -> str:
    """Which llama.cpp libraries this process runs and the exact block size they give: part of a
    calibration's key, since the exact-rows build's passes cost differently and it is
    calibrated for longer blocks."""
    where = load().folder or "llama-cpp-python"
    return f"{where}; exact blocks {exact_block_size()}"


def invariant_batch_size() -> int | None:
    """B such that this build's calls of B or more rows compute the rows of each whole tile of B
    counted from the call's start bitwise the same whatever the call's length, or None where
    that was not measured.

    Without llamafile and with repack (the recommended build), on the packaged Qwen target, a
    prefix read in one call of L rows, then S more rows in a second call, against one cold call
    over both: L = 8 gives bitwise the cold rows for S = 8, 9, 12, 16 and 33 and other rows for
    S = 1..7; L = 4 other rows for S >= 4; L = 13 other rows for S = 4, 8, 9 and 12 (its 13th
    row lies outside a whole tile). Hence B = 8, and a KV cache row is the row a cold read of a
    longer prompt computes when it lay in a whole tile of 8 of a call that began at a multiple
    of 8 (:meth:`~.model.LlamaCppModel.keep_reusable`).

    On the exact-rows build every row of a call is bitwise the one-token row, whatever the
    call's length up to a micro-batch (:data:`MICRO_BATCH` rows, llama.cpp's split of longer
    calls; checked on the packaged target for B = 1..64, 65, 96, 128, 200, 256 and 512,
    ``bench/results/archive/kernels_exact_rows_tinyblas*.json``), so B = 1: every cached row,
    generated tokens included, is the row a cold read computes.
    """
    if patched_exact_rows():
        return 1
    features = build_features()
    return _INVARIANT_BATCHES.get(("LLAMAFILE" in features, "REPACK" in features))


_BELOW_ONE = np.nextafter(np.float32(1.0), np.float32(0.0))


def probabilities(logits: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """Write softmax(logits) into ``out`` (float64) and return it; all three have shape (V,).

    The single function from logits to probabilities on every call path: a row's result depends
    on that row's values only, never on how many rows were scored together. The shift and the
    exponential run in float32 (in ``scratch``), the normalisation in float64: faster than float64
    throughout, at a relative difference of about 1e-6 per probability (the float32
    exponential's rounding). Tokens more than ~104 logits below the best one get
    probability 0 (float32 underflow).

    The row's argmax stays the logits' argmax (the lowest id among ties), which greedy decoding
    reads off the logits directly (:meth:`~.model.LlamaCppModel.top_tokens`): the float32
    exponential rounds a logit within about 3e-8 of the largest to the largest's 1.0, and such
    an entry with a lower id than the largest is set just below 1.0 (any above 1.0, were the
    exponential to round so, to 1.0).
    """
    top = int(np.argmax(logits))
    np.subtract(logits, logits[top], out=scratch)
    np.exp(scratch, out=scratch)
    np.minimum(scratch, 1.0, out=scratch)
    before = scratch[:top]
    before[before == 1.0] = _BELOW_ONE
    out[:] = scratch
    out *= 1.0 / out.sum()
    return out


_GGML_LOG_LEVEL_ERROR = 4
#: How llama.cpp reports a call stopped by its abort callback (``GGML_STATUS_ABORTED`` is 1):
#: asked for (:meth:`~.context.LlamaContext.interrupt`), so not an error.
_ABORTED = re.compile(rb"(failed with error|compute status:) 1\n?$")


def _silence_logs(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    """llama.cpp log callback that prints errors to stderr, but for interrupted calls, and drops
    everything else."""
    if level == _GGML_LOG_LEVEL_ERROR and not _ABORTED.search(text):
        print(text.decode("utf-8", "replace"), end="", file=sys.stderr, flush=True)


_log_callback: list[object] = []  # made once, kept alive while llama.cpp holds it


def init_backend(verbose: bool) -> None:
    """Load the llama.cpp libraries (:func:`~spec_decode.backends.llamacpp.library.load`, once)
    and initialise llama.cpp, routing its logs to :func:`_silence_logs` unless ``verbose``."""
    load()
    if not verbose:
        if not _log_callback:
            _log_callback.append(llama_cpp.llama_log_callback(_silence_logs))
        llama_cpp.llama_log_set(_log_callback[0], ctypes.c_void_p(0))
    llama_cpp.llama_backend_init()
