"""The llama.cpp model behind the :class:`spec_decode.core.models.Model` interface (see the
package docstring for the cache, block and tree design)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from spec_decode.backends.cores import available_cores
from spec_decode.backends.llamacpp.context import LlamaContext, NoRoom, Row
from spec_decode.backends.llamacpp.gguf_header import gguf_file
from spec_decode.backends.llamacpp.kernels import (
    exact_block_size,
    invariant_batch_size,
    probabilities,
)
from spec_decode.backends.llamacpp.promise import ExactRows, exact_rows
from spec_decode.backends.llamacpp.tree_paths import path_sequences
from spec_decode.backends.prefix_cache import ForwardStats, PrefixCachedModel, common_prefix

DEFAULT_TREE_LEAVES = 64
Read = Callable[[np.ndarray], np.ndarray]  # what a decode's logits are read into


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
        Memory-map the file instead of reading it into memory: faster to load, but a file
        truncated or overwritten while the model runs kills the process or changes the weights.
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
        file = gguf_file(path)
        context = LlamaContext(
            file, n_threads=int(n_threads or available_cores()), n_ctx=n_ctx,
            n_seq=max_tree_leaves + 1, mmap=mmap, verbose=verbose,
        )  # fmt: skip
        self._attach(file, context, 0, context.decode, max_tree_leaves, exact_blocks)
        self._keep_promise(exact_rows(file, self.probe, self.vocab_size, self.context_window)
                           if check_rows else None)  # fmt: skip

    @classmethod
    def on_sequence(
        cls,
        file: Path,
        context: LlamaContext,
        seq: int,
        decode: Callable[[list[Row]], np.ndarray],
        promise: ExactRows | None,
    ) -> LlamaCppModel:
        """A model on sequence ``seq`` of a ``context`` other models share (no trees), its rows
        fed through ``decode``, keeping ``promise`` (:mod:`.slots` opens them)."""
        model = cls.__new__(cls)
        model._attach(file, context, seq, decode, 0, True)
        model._keep_promise(promise)
        return model

    def _attach(
        self,
        file: Path,
        context: LlamaContext,
        seq: int,
        decode: Callable[[list[Row]], np.ndarray],
        max_tree_leaves: int,
        exact_blocks: bool,
    ) -> None:
        """Bind this model to sequence ``seq`` of ``context``, its rows fed through ``decode``."""
        self.path, self._context, self._seq, self._decode_rows = file, context, seq, decode
        self.vocab_size, self.context_window = context.vocab_size, context.context_window
        self.n_threads, self.max_tree_leaves = context.n_threads, int(max_tree_leaves)
        self.exact_blocks = exact_blocks
        self._scratch = np.empty(self.vocab_size, dtype=np.float32)
        self.stats = ForwardStats()
        self._cached: list[int] = []
        self._invariant = 0  # the first cached tokens were all computed in invariant tiles

    def _keep_promise(self, promise: ExactRows | None) -> None:
        """Feed blocks no longer than ``promise`` holds (the build's size unchecked, for a
        draft: None), and reuse cached rows only where the build's invariant tiles hold."""
        self.exact_rows = promise  #: this model's exact block size and why (:mod:`.promise`)
        self.reset()
        self.stats = ForwardStats()  # the row check's calls are not the caller's
        self.exact_block_size = promise.size if promise else exact_block_size()
        reduced = promise is not None and promise.reduced
        self.invariant_batch_size = None if reduced else invariant_batch_size()

    def close(self) -> None:
        """Free the llama.cpp context and weights (every model sharing them is unusable)."""
        if hasattr(self, "_context"):
            self._context.close()

    @property
    def cache_length(self) -> int:
        """How many positions the KV cache itself holds for the sequence (0 when empty)."""
        return self._context.length(self._seq)

    def reset(self) -> None:
        """Drop the KV cache (the next call re-reads its whole prefix)."""
        self._context.forget(self._seq)
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

    def adopt(self, donor: LlamaCppModel, prefix: Sequence[int]) -> int:
        """Hold ``donor``'s cells (another slot's, the tokens of ``prefix`` from position 0 as far
        as it holds them) in place of this cache; return how many tokens it then holds. Where
        rows are bitwise the same however calls were cut (B = 1, :meth:`keep_reusable`), keys and
        values depend only on the tokens before: they are this sequence's own. llama.cpp moves
        the data at the next decode, before it writes a cell: the copy is of the cells now."""
        if self.invariant_batch_size != 1 or donor._context is not self._context:
            return 0
        with self._context.lock:
            keep = min(len(prefix), self._context.length(donor._seq))
            if keep <= 0:
                return 0
            self._context.copy_sequence(donor._seq, self._seq)
            if not self._context.forget(self._seq, keep):
                self.reset()
                return 0
        self._cached, self._invariant = list(prefix[:keep]), keep
        return keep

    def probe(self, tokens: Sequence[int], first_position: int) -> np.ndarray:
        """Logits (a copy) of every row of ``tokens``, fed in ONE call at
        ``first_position`` on after the cache is cut there: the row check of :mod:`.promise`,
        run at load time on the context itself, outside the cache bookkeeping (reset after)."""
        self._cached, self._invariant = [], 0
        self._context.forget(self._seq, first_position)
        rows = [
            Row(token, first_position + i, (self._seq,), True) for i, token in enumerate(tokens)
        ]
        return self._context.decode(rows).copy()

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

    def _decoded(self, sequence: list[int], n_rows: int, read: Read) -> np.ndarray:
        """``read`` of the logits after each of the last ``n_rows`` prefixes of ``sequence``,
        after feeding what the cache lacks in the calls :meth:`_chunks` chooses (from an empty
        cache where llama.cpp found no cells: :class:`~.context.NoRoom`)."""
        try:
            return self._fed(sequence, n_rows, read)
        except NoRoom:  # the cache was reset: the whole sequence is read again
            return self._fed(sequence, n_rows, read)

    def _fed(self, sequence: list[int], n_rows: int, read: Read) -> np.ndarray:
        start = time.perf_counter()
        self.check_fits(len(sequence) - n_rows + 1, n_rows - 1)
        keep = self._trim(min(common_prefix(self._cached, sequence), len(sequence) - n_rows))
        new = sequence[keep:]
        self.check_ids(new)
        first_row = len(new) - n_rows  # the first fed token whose logits are asked for
        seqs, rows = (self._seq,), []
        for begin, end in self._chunks(len(new), first_row):
            fed = [Row(new[i], keep + i, seqs, i >= first_row) for i in range(begin, end)]
            logits = self._decode(fed, start)
            size, at = self.invariant_batch_size, keep + begin
            if size and end - begin >= size and at == self._invariant and at % size == 0:
                self._invariant = at + (end - begin) // size * size  # its whole tiles
            if end > first_row:
                rows.append(read(logits))
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
        node_seqs, depths = path_sequences(parents)
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
            self._context.copy_sequence(0, seq)
        every_path = tuple(range(n_paths + 1))
        fed = [Row(token, keep + i, every_path, i == len(new) - 1) for i, token in enumerate(new)]
        fed += [
            Row(token, len(prefix) - 1 + depths[i], node_seqs[i], True)
            for i, token in enumerate(tokens)
        ]
        try:
            logits = self._decode(fed, start)
        finally:
            for seq in range(1, n_paths + 1):
                self._context.drop(seq)
        self._cached.extend(new)
        return self._read_rows(logits)

    def _trim(self, keep: int) -> int:
        """Cut the cache back to its first ``keep`` tokens; return how many it kept."""
        if keep < len(self._cached):
            if not self._context.forget(self._seq, keep):
                self.reset()  # this memory type cannot drop a tail: start over
                return 0
            del self._cached[keep:]
            self._invariant = min(self._invariant, keep)
        return len(self._cached)

    def _decode(self, rows: list[Row], start: float) -> np.ndarray:
        """The output rows' logits of ONE ``llama_decode`` of ``rows`` (a slot's shares its call
        with other slots' rows: :mod:`.slots`), timed."""
        decode_start = time.perf_counter()
        self.stats.bookkeeping_s += decode_start - start
        try:
            logits = self._decode_rows(rows)
        except RuntimeError as error:
            self.reset()
            raise type(error)(f"{error} (the cache was reset)") from error
        self.stats.forward_s += time.perf_counter() - decode_start
        self.stats.calls += 1
        self.stats.tokens_fed += len(rows)
        return logits

    def _read_rows(self, logits: np.ndarray) -> np.ndarray:
        """Probabilities of the rows of ``logits``, in order."""
        start = time.perf_counter()
        rows = np.empty(logits.shape, dtype=np.float64)
        for logit_row, row in zip(logits, rows, strict=True):
            probabilities(logit_row, row, self._scratch)
        self.stats.softmax_s += time.perf_counter() - start
        return rows

    def _read_top(self, logits: np.ndarray) -> np.ndarray:
        """The argmax of each row of ``logits`` (``ValueError`` for a row whose largest logit
        is NaN or infinite)."""
        top = np.argmax(logits, axis=-1)  # NaN counts as the largest: caught just below
        if not np.isfinite(logits[np.arange(len(logits)), top]).all():
            raise ValueError("the target's logits contain NaN or infinite values")
        return top


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
