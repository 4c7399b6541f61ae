"""A bare llama.cpp model and context for one sequence: tokens fed in calls of any size, each
call's rows of logits read back. What the kernel checks (:mod:`.exact_rows`) and the kernel
benchmarks (``bench/kernels/kernels_*.py``) drive, without the backend's cache bookkeeping.

It runs whichever libraries :func:`~spec_decode.backends.llamacpp.library.load` chose (a kernel
benchmark of another build sets ``LLAMA_CPP_LIB_PATH`` before starting). Flash attention is as in
the backend (:func:`~.kernels.flash_attention_type`), and the micro-batch is the backend's
(:data:`~.kernels.MICRO_BATCH`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from spec_decode.backends.llamacpp.kernels import MICRO_BATCH, flash_attention_type, init_backend
from spec_decode.backends.llamacpp.library import llama_cpp


class RawContext:
    """``model_path`` loaded with a context of ``n_ctx`` positions (``n_batch`` rows a call at
    most) on ``threads`` threads; ``eval_callback`` (a ``ggml_backend_sched_eval_callback``) sees
    every graph node, for profiling. Use as a context manager, or call :meth:`close`."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        n_ctx: int = 512,
        threads: int = 2,
        flash_attention: bool | None = None,
        eval_callback: Any = None,
    ) -> None:
        init_backend(False)
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = 0
        self.model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), params)
        if not self.model:
            raise ValueError(f"llama.cpp could not load {model_path}")
        vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(vocab))
        context = llama_cpp.llama_context_default_params()
        context.n_ctx = context.n_batch = max(n_ctx, 64)
        context.n_ubatch = min(MICRO_BATCH, context.n_batch)
        context.n_threads = context.n_threads_batch = threads
        context.flash_attn_type = flash_attention_type(flash_attention)
        context.no_perf = True
        if eval_callback is not None:
            context.cb_eval = eval_callback
            context.cb_eval_user_data = None
        self.ctx = llama_cpp.llama_init_from_model(self.model, context)
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llama_cpp.llama_batch_init(context.n_batch, 0, 1)

    def decode(
        self, tokens: Sequence[int], first_position: int, every_row: bool = True
    ) -> np.ndarray:
        """Feed ``tokens`` at positions ``first_position``, ... in ONE ``llama_decode`` and
        return a copy of the logits, shape (rows, vocab): every row's, or the last row's only
        (shape (1, vocab)) without ``every_row``."""
        batch = self.batch
        batch.n_tokens = len(tokens)
        for i, token in enumerate(tokens):
            batch.token[i] = token
            batch.pos[i] = first_position + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = every_row or i == len(tokens) - 1
        status = llama_cpp.llama_decode(self.ctx, batch)
        if status != 0:
            raise RuntimeError(f"llama_decode failed with status {status}")
        rows = len(tokens) if every_row else 1
        logits = llama_cpp.llama_get_logits(self.ctx)
        return np.ctypeslib.as_array(logits, shape=(rows, self.n_vocab)).copy()

    def forget_from(self, position: int) -> None:
        """Remove the cached positions from ``position`` on (0: the whole sequence)."""
        if position == 0:
            llama_cpp.llama_memory_clear(self.memory, True)
        else:
            llama_cpp.llama_memory_seq_rm(self.memory, 0, position, -1)

    def close(self) -> None:
        llama_cpp.llama_batch_free(self.batch)
        llama_cpp.llama_free(self.ctx)
        llama_cpp.llama_model_free(self.model)

    def __enter__(self) -> RawContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
