"""The llama.cpp model behind the :class:`spec_decode.core.models.Model` interface (see the
package docstring for the cache, block and tree design)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from spec_decode.backends.cores import available_cores
from spec_decode.backends.llamacpp.kernels import (
    MICRO_BATCH,
    exact_block_size,
    init_backend,
    invariant_batch_size,
    probabilities,
)
from spec_decode.backends.llamacpp.library import llama_cpp
from spec_decode.backends.llamacpp.promise import exact_rows
from spec_decode.backends.prefix_cache import ForwardStats, PrefixCachedModel, common_prefix

DEFAULT_MAX_CTX = 4096
DEFAULT_TREE_LEAVES = 64


class LlamaCppModel(PrefixCachedModel):
    """A GGUF causal LM with a reusable llama.cpp KV cache: ``next_dist``, block ``score`` and
    ``score_tree``.

    Parameters
    ----------
    path
        A GGUF file, used as is (quantized weights, no conversion).
    n_threads
        CPU threads for one-token and batch decoding (default: every core this process may use).
    n_ctx
        The context window (KV cache size); default ``min(trained context, 4096)``.
    max_tree_leaves
        The most leaves a tree passed to :meth:`score_tree` may have.
    exact_blocks
        Feed drafted blocks in calls of at most :attr:`exact_block_size` tokens, so every row is
        bitwise the one-token score (see :meth:`_chunks`); off, a block is one call.
    verbose
        Let llama.cpp print its load and timing logs.
    check_rows
        Make the promise per model (:mod:`.promise`): check, on this model's weights, which
        block size this build scores bitwise like one-token passes, and use no more. A target
        needs it; a draft does not (its proposals are exact whatever its rows: it proposes from
        what it computed), so a draft takes the build's size unchecked and reuses its cache.
    mmap
        Memory-map the file instead of reading it into memory. Faster to load and shares the
        page cache, but the weights are then the file's current bytes: a file truncated while
        the model runs kills the process with SIGBUS, and one overwritten in place changes the
        weights mid-run with no error. Off, the weights are a private copy made at load time.
    """

    def __init__(
        self,
        path: str | Path,
        n_threads: int | None = None,
        n_ctx: int | None = None,
        max_tree_leaves: int = DEFAULT_TREE_LEAVES,
        exact_blocks: bool = True,
        verbose: bool = False,
        mmap: bool = False,
        check_rows: bool = True,
    ) -> None:
        file = Path(path).expanduser()
        if not file.is_file():
            raise ValueError(f"no GGUF model file at {file}")
        init_backend(verbose)
        # looked up now: at interpreter exit, where __del__ may run, the bindings cannot import
        self._free = (llama_cpp.llama_batch_free, llama_cpp.llama_free, llama_cpp.llama_model_free)
        model_params = llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = 0
        model_params.load_mode = (
            llama_cpp.LLAMA_LOAD_MODE_MMAP if mmap else llama_cpp.LLAMA_LOAD_MODE_NONE
        )
        self._model = llama_cpp.llama_model_load_from_file(str(file).encode(), model_params)
        if not self._model:
            raise ValueError(f"llama.cpp could not load {file} as a GGUF model")
        self.path = file
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.vocab_size = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        trained = int(llama_cpp.llama_model_n_ctx_train(self._model))
        self.context_window = int(n_ctx or min(trained, DEFAULT_MAX_CTX))
        self.n_threads = int(n_threads or available_cores())
        self.max_tree_leaves = int(max_tree_leaves)
        self._ctx = self._new_context()
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(self.context_window, 0, self.max_tree_leaves + 1)
        self._scratch = np.empty(self.vocab_size, dtype=np.float32)
        self.stats = ForwardStats()
        self._cached: list[int] = []
        self._invariant = 0  # the first cached tokens were all computed in invariant tiles
        #: this model's exact block size on this build and why (:mod:`.promise`); None unchecked
        self.exact_rows = (
            exact_rows(file, self._probe, self.vocab_size, self.context_window)
            if check_rows
            else None
        )
        self.reset()
        self.stats = ForwardStats()  # the row check's calls are not the caller's
        self.exact_block_size = self.exact_rows.size if self.exact_rows else exact_block_size()
        self.exact_blocks = exact_blocks
        # a model whose rows fall short of the build's promise has no measured invariant tiles
        reduced = self.exact_rows is not None and self.exact_rows.reduced
        self.invariant_batch_size = None if reduced else invariant_batch_size()

    def _new_context(self) -> llama_cpp.llama_context_p:
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = params.n_batch = self.context_window
        params.n_ubatch = min(MICRO_BATCH, self.context_window)
        params.n_seq_max = self.max_tree_leaves + 1
        params.n_outputs_max = max(params.n_batch, params.n_seq_max)  # llama.cpp asserts this
        params.kv_unified = True  # one cache shared by all sequences (tree paths share a prefix)
        params.n_threads = params.n_threads_batch = self.n_threads
        # Flash attention tiles the keys differently for several query rows than for one once the
        # cache passes 256 cells (0.3 in a logit at 258 tokens): off, blocks stay bitwise equal.
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        params.no_perf = True
        ctx = llama_cpp.llama_init_from_model(self._model, params)
        if not ctx:
            raise ValueError(f"llama.cpp could not create a context of {self.context_window}")
        return ctx

    def close(self) -> None:
        """Free the llama.cpp batch, context and model (the object is unusable afterwards)."""
        if not hasattr(self, "_free"):
            return  # refused before loading anything
        free_batch, free_context, free_model = self._free
        if getattr(self, "_ctx", None):
            free_batch(self._batch)
            free_context(self._ctx)
            self._ctx = None
        if getattr(self, "_model", None):
            free_model(self._model)
            self._model = None

    def __del__(self) -> None:
        self.close()

    @property
    def cache_length(self) -> int:
        """How many positions the KV cache itself holds for the sequence (0 when empty)."""
        return int(llama_cpp.llama_memory_seq_pos_max(self._memory, 0)) + 1

    def reset(self) -> None:
        """Drop the KV cache (the next call re-reads its whole prefix)."""
        llama_cpp.llama_memory_clear(self._memory, True)
        self._cached = []
        self._invariant = 0

    def keep_reusable(self, prompt: Sequence[int]) -> int:
        """Cut the cache back to what reading ``prompt`` next may reuse; return its length.

        A cold run reads the whole prompt in one call, and a token's keys and values depend on
        how its call computed it (see :func:`~.kernels.invariant_batch_size`, B below): calls of
        B or more rows compute rows in whole tiles of B from the call's start bitwise the same
        whatever the call's length. So a cached token is reused only if it lay in such a tile of
        such a call, as did every token before it (with B > 1 generated tokens, fed a few at a
        time, never do; on the exact-rows build B = 1 and every cached token does); the kept
        length is a multiple of B, and at least B prompt tokens are left to read, so that the
        rest is read in tiles aligned with the cold run's. Every row is then bitwise
        the row the cold run computes. With no B for this build, nothing is kept.
        """
        size = self.invariant_batch_size
        keep = 0
        if size is not None:
            prompt = list(prompt)
            keep = min(common_prefix(self._cached, prompt), self._invariant, len(prompt) - size)
            keep -= keep % size
        if keep <= 0:
            self.reset()
            return 0
        return self._trim(keep)

    def _probe(self, tokens: Sequence[int], first_position: int, n_rows: int) -> np.ndarray:
        """Logits (a copy) of the first ``n_rows`` of ``tokens``, fed in ONE call at
        ``first_position`` on after the cache is cut there: the row check of :mod:`.promise`,
        outside the cache bookkeeping (which it resets)."""
        self._cached, self._invariant = [], 0
        llama_cpp.llama_memory_seq_rm(self._memory, 0, first_position, -1)
        for i, token in enumerate(tokens):
            self._put(i, token, first_position + i, (0,), i < n_rows)
        self._decode(len(tokens), time.perf_counter())
        logits = llama_cpp.llama_get_logits(self._ctx)
        return np.ctypeslib.as_array(logits, shape=(n_rows, self.vocab_size)).copy()

    def _dists(self, sequence: list[int], n_rows: int) -> np.ndarray:
        """Probabilities after each of the last ``n_rows`` prefixes of ``sequence``."""
        return self._decoded(sequence, n_rows, self._read_rows)

    def top_tokens(self, prefix: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        """The most likely token of each row :meth:`score` returns for ``prefix`` and
        ``tokens`` (the lowest id among ties), from the same pass, read off the logits without
        computing probabilities: all greedy decoding needs
        (:func:`~spec_decode.core.models.greedy_tokens`). :func:`~.kernels.probabilities`
        keeps each row's argmax the logits' argmax, so the two agree bitwise."""
        return self._decoded(list(prefix) + list(tokens), len(tokens) + 1, self._read_top)

    def _decoded(
        self, sequence: list[int], n_rows: int, read: Callable[[int], np.ndarray]
    ) -> np.ndarray:
        """``read``'s rows for each of the last ``n_rows`` prefixes of ``sequence``, after
        feeding what the cache lacks in the calls :meth:`_chunks` chooses."""
        start = time.perf_counter()
        self.check_fits(len(sequence) - n_rows + 1, n_rows - 1)
        keep = self._trim(min(common_prefix(self._cached, sequence), len(sequence) - n_rows))
        new = sequence[keep:]
        self.check_ids(new)
        first_row = len(new) - n_rows  # the first fed token whose logits are asked for
        rows = []
        for begin, end in self._chunks(len(new), first_row):
            for i in range(begin, end):
                self._put(i - begin, new[i], keep + i, (0,), i >= first_row)
            self._decode(end - begin, start)
            size, at = self.invariant_batch_size, keep + begin
            if size and end - begin >= size and at == self._invariant and at % size == 0:
                self._invariant = at + (end - begin) // size * size  # its whole tiles
            if end > first_row:
                rows.append(read(end - max(begin, first_row)))
            start = time.perf_counter()
        self._cached.extend(new)
        return rows[0] if len(rows) == 1 else np.concatenate(rows)  # no copy in the usual case

    def _chunks(self, n_new: int, first_row: int) -> list[tuple[int, int]]:
        """How ``n_new`` fed tokens are split into ``llama_decode`` calls.

        With ``exact_blocks``, the committed context up to the first asked-for row goes in one
        call when it is longer than :attr:`exact_block_size` (the prompt: the same call
        target-only decoding makes), and every later token in calls of at most
        ``exact_block_size`` tokens, whose rows this build computes bitwise equal to one-token
        scoring. Every score is then the number target-only decoding sees. Without it, one call.
        """
        size = self.exact_block_size
        if not self.exact_blocks or n_new <= size:
            return [(0, n_new)]
        head = first_row + 1
        begin = head if head > size else 0
        chunks = [(0, head)] if begin else []
        chunks += [(b, min(b + size, n_new)) for b in range(begin, n_new, size)]
        return chunks

    def score_tree(
        self, prefix: Sequence[int], tokens: Sequence[int], parents: Sequence[int]
    ) -> np.ndarray:
        """Rows: the distribution after ``prefix`` (row 0) and after each node of a token tree
        (row i + 1), in ONE ``llama_decode``.

        The nodes (breadth-first; ``parents[i]`` is node i's parent, -1 for the prefix) are fed
        after the prefix. Each root-to-leaf path is a sequence id sharing the cached prefix, and
        each node belongs to the sequences of the leaves below it, at position
        ``len(prefix) - 1 + depth``; so it attends to the prefix and its ancestors only, and its
        row equals scoring its path as a plain sequence as a block row does: bitwise while the
        pass feeds at most ``exact_block_size`` tokens, up to the kernels' rounding beyond.
        Afterwards the path sequences are removed: the cache holds the prefix, and the next call
        feeds whichever tokens were accepted.
        """
        prefix, tokens = list(prefix), list(tokens)
        if len(parents) != len(tokens):
            raise ValueError(f"{len(tokens)} tree tokens but {len(parents)} parents")
        start = time.perf_counter()
        node_seqs, depths = _path_sequences(parents)
        n_paths = max((max(s) for s in node_seqs), default=0)
        if n_paths > self.max_tree_leaves:
            raise ValueError(
                f"the tree has {n_paths} leaves; this model was opened with "
                f"max_tree_leaves={self.max_tree_leaves}"
            )
        self.check_fits(len(prefix), len(tokens))  # every node takes a KV cell for this pass
        keep = self._trim(min(common_prefix(self._cached, prefix), len(prefix) - 1))
        new = prefix[keep:]
        self.check_ids(new + tokens)
        for seq in range(1, n_paths + 1):
            llama_cpp.llama_memory_seq_cp(self._memory, 0, seq, -1, -1)
        every_path = tuple(range(n_paths + 1))
        for i, token in enumerate(new):
            self._put(i, token, keep + i, every_path, i == len(new) - 1)
        for i, token in enumerate(tokens):
            position = len(prefix) - 1 + depths[i]
            self._put(len(new) + i, token, position, node_seqs[i], True)
        try:
            self._decode(len(new) + len(tokens), start)
        finally:
            for seq in range(1, n_paths + 1):
                llama_cpp.llama_memory_seq_rm(self._memory, seq, -1, -1)
        self._cached.extend(new)
        return self._read_rows(len(tokens) + 1)

    def _trim(self, keep: int) -> int:
        """Cut the cache back to its first ``keep`` tokens; return how many it kept."""
        if keep < len(self._cached):
            if not llama_cpp.llama_memory_seq_rm(self._memory, 0, keep, -1):
                self.reset()  # this memory type cannot drop a tail: start over
                return 0
            del self._cached[keep:]
            self._invariant = min(self._invariant, keep)
        return len(self._cached)

    def _put(self, i: int, token: int, position: int, seqs: Sequence[int], output: bool) -> None:
        """Write batch row ``i``: token, position, sequence ids, and whether logits come out."""
        batch = self._batch
        batch.token[i] = token
        batch.pos[i] = position
        batch.n_seq_id[i] = len(seqs)
        for j, seq in enumerate(seqs):
            batch.seq_id[i][j] = seq
        batch.logits[i] = output

    def _decode(self, n_tokens: int, start: float) -> None:
        """Run ``llama_decode`` on the first ``n_tokens`` batch rows, timing it."""
        self._batch.n_tokens = n_tokens
        decode_start = time.perf_counter()
        self.stats.bookkeeping_s += decode_start - start
        status = llama_cpp.llama_decode(self._ctx, self._batch)
        self.stats.forward_s += time.perf_counter() - decode_start
        if status != 0:
            self.reset()
            raise RuntimeError(f"llama_decode failed with status {status} (the cache was reset)")
        self.stats.calls += 1
        self.stats.tokens_fed += n_tokens

    def _read_rows(self, n_rows: int) -> np.ndarray:
        """Probabilities of the ``n_rows`` output rows of the last decode, in batch order."""
        start = time.perf_counter()
        logits = np.ctypeslib.as_array(
            llama_cpp.llama_get_logits(self._ctx), shape=(n_rows, self.vocab_size)
        )
        rows = np.empty((n_rows, self.vocab_size), dtype=np.float64)
        for logit_row, row in zip(logits, rows, strict=True):
            probabilities(logit_row, row, self._scratch)
        self.stats.softmax_s += time.perf_counter() - start
        return rows

    def _read_top(self, n_rows: int) -> np.ndarray:
        """The argmax of each of the ``n_rows`` output rows of the last decode (``ValueError``
        for a row whose largest logit is NaN or infinite)."""
        logits = np.ctypeslib.as_array(
            llama_cpp.llama_get_logits(self._ctx), shape=(n_rows, self.vocab_size)
        )
        top = np.argmax(logits, axis=-1)  # NaN counts as the largest: caught just below
        if not np.isfinite(logits[np.arange(n_rows), top]).all():
            raise ValueError("the target's logits contain NaN or infinite values")
        return top


def _path_sequences(parents: Sequence[int]) -> tuple[list[tuple[int, ...]], list[int]]:
    """For a breadth-first tree: each node's sequence ids (1 + the index of every leaf below it,
    ascending) and its depth (1 for a child of the prefix)."""
    depths: list[int] = []
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ValueError(f"node {i}'s parent {parent} is not an earlier node or -1")
        depths.append(1 if parent < 0 else depths[parent] + 1)
    has_child = {parent for parent in parents if parent >= 0}
    seqs: list[set[int]] = [set() for _ in parents]
    leaves = [i for i in range(len(parents)) if i not in has_child]
    for seq, leaf in enumerate(leaves, start=1):
        node = leaf
        while node >= 0:
            seqs[node].add(seq)
            node = parents[node]
    return [tuple(sorted(s)) for s in seqs], depths


def load_model(
    path: str | Path,
    n_threads: int | None = None,
    n_ctx: int | None = None,
    mmap: bool = False,
    check_rows: bool = True,
) -> LlamaCppModel:
    """Load a GGUF file for CPU inference, read into memory unless ``mmap``, its rows checked
    unless it is a draft (``check_rows``; see :class:`LlamaCppModel`)."""
    return LlamaCppModel(path, n_threads=n_threads, n_ctx=n_ctx, mmap=mmap, check_rows=check_rows)
