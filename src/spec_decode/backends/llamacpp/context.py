"""One GGUF loaded into llama.cpp with one context: the weights, the KV cache's sequences, and
the one place ``llama_decode`` runs.

A context holds ``n_seq`` sequences. A model of its own (:class:`~.model.LlamaCppModel`) uses one
sequence and a unified cache, so that a token tree's paths (extra sequences) share the prefix's
cells. The server's slots (:mod:`.slots`) use one sequence each, on one unified cache where the
exact-rows build keeps each sequence's cells in the order of its positions and runs flash
attention for each row as alone (:func:`~.kernels.ordered_cells`): a row's attention then
visits its own sequence's cells in the order a run alone holds them, and one call is one pass
whatever its rows. Elsewhere the slots keep cells of their own (``unified=False``), since in a
stock unified cache other sequences' cells change the order of attention's sums
(``tests/backends/test_slots.py`` shows both).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from spec_decode.backends.llamacpp.kernels import (
    MICRO_BATCH,
    flash_attention_type,
    init_backend,
    ordered_cells,
    stop_callback,
)
from spec_decode.backends.llamacpp.library import llama_cpp, load

DEFAULT_MAX_CTX = 4096


class Interrupted(RuntimeError):
    """A call stopped by :meth:`LlamaContext.interrupt` before it finished: llama.cpp dropped the
    cells of the micro-batch it was computing, and kept those of the micro-batches before it."""


class NoRoom(RuntimeError):
    """llama.cpp found no free cells for a call's rows. In a unified cache of the exact-rows
    build a sequence's next token must take a cell after its last one
    (:func:`~.kernels.ordered_cells`), so this can come with free cells left before that:
    reading the sequence again from an empty cache finds room."""


class Row(NamedTuple):
    """One token to feed: at ``position`` of the sequences ``seqs``; logits out if ``output``."""

    token: int
    position: int
    seqs: tuple[int, ...]
    output: bool


class LlamaContext:
    """The GGUF at ``path`` (read into memory unless ``mmap``) with a context of ``n_seq``
    sequences of ``n_ctx`` positions each (default: ``min(trained context, 4096)``) on
    ``n_threads`` threads; in a ``unified`` cache the sequences share ``n_ctx`` cells unless
    ``cells_per_seq``. Flash attention is as asked, by default as
    :func:`~.kernels.flash_attention_type` says. Every llama.cpp call on it holds :attr:`lock`."""

    def __init__(
        self,
        path: Path,
        *,
        n_threads: int,
        n_ctx: int | None = None,
        n_seq: int = 1,
        unified: bool = True,
        cells_per_seq: bool = False,
        mmap: bool = False,
        verbose: bool = False,
        flash_attention: bool | None = None,
    ) -> None:
        init_backend(verbose)
        # looked up now: at interpreter exit, where __del__ may run, the bindings cannot import
        self._free = (llama_cpp.llama_batch_free, llama_cpp.llama_free, llama_cpp.llama_model_free)
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = 0
        params.load_mode = (
            llama_cpp.LLAMA_LOAD_MODE_MMAP if mmap else llama_cpp.LLAMA_LOAD_MODE_NONE
        )
        self.model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not self.model:
            raise ValueError(f"llama.cpp could not load {path} as a GGUF model")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.vocab_size = int(llama_cpp.llama_vocab_n_tokens(self.vocab))
        trained = int(llama_cpp.llama_model_n_ctx_train(self.model))
        self.context_window = int(n_ctx or min(trained, DEFAULT_MAX_CTX))
        self.n_seq, self.unified, self.n_threads = n_seq, unified, n_threads
        self._flash_attn_type = flash_attention_type(flash_attention)
        self.cells_per_seq = cells_per_seq or not unified
        self.cells = self.context_window * (n_seq if self.cells_per_seq else 1)
        self.lock = threading.RLock()
        self._stop, self._stop_callback = ctypes.c_int(0), stop_callback()
        self._ctx = self._new_context()
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(self.cells, 0, n_seq)

    @classmethod
    def for_slots(
        cls, path: Path, *, n_threads: int, n_ctx: int | None, n_seq: int
    ) -> LlamaContext:
        """The context the server's slots share (:mod:`.slots`), ``n_ctx`` positions for each of
        ``n_seq`` sequences: one unified cache where this build keeps each sequence's cells in
        order (:func:`~.kernels.ordered_cells`), so that one call is one pass whatever its rows,
        else cells of their own."""
        load()  # the build decides
        return cls(
            path, n_threads=n_threads, n_ctx=n_ctx, n_seq=n_seq, unified=ordered_cells(),
            cells_per_seq=True,
        )  # fmt: skip

    def _new_context(self) -> llama_cpp.llama_context_p:
        params = llama_cpp.llama_context_default_params()
        cells = self.cells
        params.n_ctx = params.n_batch = cells
        params.n_ubatch = min(MICRO_BATCH, cells)
        params.n_seq_max = self.n_seq
        params.n_outputs_max = max(params.n_batch, params.n_seq_max)  # llama.cpp asserts this
        params.kv_unified = self.unified
        params.n_threads = params.n_threads_batch = self.n_threads
        params.flash_attn_type = self._flash_attn_type
        params.no_perf = True
        if self._stop_callback is not None:
            params.abort_callback = self._stop_callback
            params.abort_callback_data = ctypes.cast(ctypes.byref(self._stop), ctypes.c_void_p)
        ctx = llama_cpp.llama_init_from_model(self.model, params)
        if not ctx:
            raise ValueError(f"llama.cpp could not create a context of {cells} cells")
        return ctx

    def decode(self, rows: Sequence[Row]) -> np.ndarray:
        """Feed ``rows`` in ONE ``llama_decode``; the logits of the output rows, in order, shape
        (outputs, vocab): a view of llama.cpp's buffer, valid until the next call
        (``RuntimeError`` if llama.cpp refuses the batch, :class:`Interrupted` if
        :meth:`interrupt` stopped it)."""
        with self.lock:
            batch = self._batch
            batch.n_tokens = len(rows)
            for i, row in enumerate(rows):
                batch.token[i] = row.token
                batch.pos[i] = row.position
                batch.n_seq_id[i] = len(row.seqs)
                for j, seq in enumerate(row.seqs):
                    batch.seq_id[i][j] = seq
                batch.logits[i] = row.output
            status = llama_cpp.llama_decode(self._ctx, batch)
            if status == 2 and self._stop_callback is not None:
                raise Interrupted("llama_decode was interrupted")
            if status == 1:
                raise NoRoom("llama.cpp found no free cells for this call's rows (status 1)")
            if status != 0:
                raise RuntimeError(f"llama_decode failed with status {status}")
            outputs = sum(row.output for row in rows)
            logits = llama_cpp.llama_get_logits(self._ctx)
            return np.ctypeslib.as_array(logits, shape=(outputs, self.vocab_size))

    @property
    def interruptible(self) -> bool:
        """Whether :meth:`interrupt` can stop a call (the exact-rows build's callback)."""
        return self._stop_callback is not None

    def interrupt(self) -> None:
        """Stop the call in flight after the graph node it is computing (:class:`Interrupted`),
        and every call after it until :meth:`clear_interrupt`. Any thread: never takes
        :attr:`lock`, which the call holds."""
        self._stop.value = 1

    def clear_interrupt(self) -> None:
        """Let calls run to their end again (see :meth:`interrupt`)."""
        self._stop.value = 0

    def forget(self, seq: int, first_position: int = 0) -> bool:
        """Drop sequence ``seq``'s cells from ``first_position`` on (False where this memory
        cannot drop a tail: then the whole sequence is dropped). A unified cache of one model's
        window belongs to that model: dropping all of its sequence clears every cell."""
        with self.lock:
            if first_position == 0 and self.unified and not self.cells_per_seq:
                llama_cpp.llama_memory_clear(self._memory, True)
                return True
            if llama_cpp.llama_memory_seq_rm(self._memory, seq, first_position, -1):
                return True
            llama_cpp.llama_memory_seq_rm(self._memory, seq, -1, -1)
            return False

    def drop(self, seq: int) -> None:
        """Drop every cell of sequence ``seq`` alone (a tree path after its pass)."""
        with self.lock:
            llama_cpp.llama_memory_seq_rm(self._memory, seq, -1, -1)

    def copy_sequence(self, source: int, target: int) -> None:
        """Make ``target`` hold every cell of ``source`` in place of its own: in a unified
        cache by sharing them (a tree path sharing the prefix, a slot another's prompt), with
        cells per sequence as a copy, their data copied at the next decode, before it writes any."""
        with self.lock:
            llama_cpp.llama_memory_seq_rm(self._memory, target, -1, -1)
            llama_cpp.llama_memory_seq_cp(self._memory, source, target, -1, -1)

    def length(self, seq: int) -> int:
        """How many positions the cache holds for ``seq`` (0 when empty)."""
        with self.lock:
            return int(llama_cpp.llama_memory_seq_pos_max(self._memory, seq)) + 1

    def close(self) -> None:
        """Free the batch, the context and the weights (unusable afterwards; idempotent)."""
        if not hasattr(self, "_free"):
            return  # refused before loading anything
        free_batch, free_context, free_model = self._free
        if getattr(self, "_ctx", None):
            free_batch(self._batch)
            free_context(self._ctx)
            self._ctx = None
        if getattr(self, "model", None):
            free_model(self.model)
            self.model = None

    def __del__(self) -> None:
        self.close()
