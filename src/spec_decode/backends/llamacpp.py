"""A GGUF model run by llama.cpp behind the :class:`spec_decode.core.models.Model` interface.

The model file is memory-mapped as it is (quantized weights included, no conversion) and driven
through llama-cpp-python's low-level C API (``llama_decode`` on a ``llama_batch``), not its
high-level ``Llama`` class, so every call costs exactly one ``llama_decode`` plus the softmax.

Like :class:`spec_decode.backends.transformers.TransformersModel`, :class:`LlamaCppModel` keeps
one KV cache plus the list of tokens it covers. On each call it finds the longest common prefix of
the cached tokens and the requested sequence, removes the rest from the cache
(``llama_memory_seq_rm``; at most ``len(prefix) - 1`` tokens are kept, so the last committed
token is fed again and its logits come out) and feeds the remainder in ONE ``llama_decode``,
asking for logits only at the rows the caller needs. So the target scores the last committed
token plus all k drafted tokens in one pass, and both caches are cut back to the accepted length
by the next call itself.

Probabilities: every row, whichever call produced it, goes through the same function
(:func:`probabilities`: the softmax of that row's float32 logits as float64, read in place from
llama.cpp's logits buffer). Equal logits therefore always give equal probability vectors, so
target-only and speculative decoding differ only where llama.cpp's logits differ. Temperature,
top-k, top-p and min-p are applied by the sampler, identically for draft and target.

Block versus one-token logits: llama.cpp's CPU matrix kernels choose their code path by the
number of rows in the batch, so a token scored inside a block can get slightly different logits
than the same token scored alone (differences of 0.4-0.8 in a logit were seen with the default
build). Which block sizes are bitwise equal to one-token scoring depends on two build options,
which :func:`build_features` reads back from ``llama_print_system_info()``:

* ``LLAMAFILE`` off and ``REPACK`` off: blocks of up to 7 tokens are bitwise equal (all CPU
  work ~30% slower);
* ``LLAMAFILE`` off, ``REPACK`` on (``CMAKE_ARGS="-DGGML_LLAMAFILE=OFF"``): blocks of 2-3 tokens
  are bitwise equal, one-token speed unchanged; the repacked Q4 kernels handle rows in groups of
  four, so blocks of 4 or more may differ;
* ``LLAMAFILE`` on (the default wheel): no block size is guaranteed equal.

:attr:`LlamaCppModel.exact_block_sizes` states that range for the loaded library; outside it
block rows agree with one-token rows only up to float rounding in the kernels. (The repack path
applies only to weight formats it can repack, such as Q4_0/Q4_K/IQ4_NL; float32 weights always
take the plain path.)

Tree scoring: :meth:`LlamaCppModel.score_tree` feeds all nodes of a token tree in ONE
``llama_decode``. Each root-to-leaf path is its own sequence id (1, 2, ...) sharing the cached
prefix (``llama_memory_seq_cp`` from sequence 0); a node carries the ids of every leaf below it
and the position ``len(prefix) - 1 + depth``, so llama.cpp's attention mask lets it see the
prefix and its ancestors only. This needs a unified KV cache (``kv_unified``) and
``n_seq_max = 1 + max_tree_leaves``; afterwards the path sequences are removed again and the
cache holds the prefix alone.

Pinned and tested with llama-cpp-python 0.3.36.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import numpy as np

#: Blocks no longer than this are bitwise equal to one-token scoring, by build (see above).
_EXACT_BLOCKS = {(False, False): 7, (False, True): 3}
DEFAULT_MAX_CTX = 4096
DEFAULT_TREE_LEAVES = 64


@dataclass
class ForwardStats:
    """What the adapter spent: ``llama_decode`` calls, tokens fed, and seconds in cache
    bookkeeping (common prefix, removal, batch filling), in ``llama_decode`` itself, and in the
    float64 softmax (the same fields as the transformers backend's)."""

    calls: int = 0
    tokens_fed: int = 0
    bookkeeping_s: float = 0.0
    forward_s: float = 0.0
    softmax_s: float = 0.0

    def reset(self) -> None:
        self.calls = self.tokens_fed = 0
        self.bookkeeping_s = self.forward_s = self.softmax_s = 0.0


def build_features() -> dict[str, str]:
    """The CPU backend's build features as ``llama_print_system_info()`` reports them,
    e.g. ``{"AVX2": "1", "REPACK": "1", ...}`` (a feature built out is simply absent)."""
    info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    return dict(re.findall(r"([A-Z0-9_]+) = (\w+)", info))


def exact_block_size() -> int:
    """The longest block whose rows this llama.cpp build computes bitwise equal to one-token
    scoring: 7 without llamafile and repack kernels, 3 without llamafile, else 1 (none)."""
    features = build_features()
    key = ("LLAMAFILE" in features, "REPACK" in features)
    return _EXACT_BLOCKS.get(key, 1)


def probabilities(logits: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """Write softmax(logits) into ``out`` (float64) and return it; all three have shape (V,).

    The single function from logits to probabilities on every call path: a row's result depends
    on that row's values only, never on how many rows were scored together. The shift and the
    exponential run in float32 (in ``scratch``), the normalisation in float64: 0.16 ms per row of
    151,936 logits here against 0.26 ms for float64 throughout, at a relative difference of about
    1e-6 per probability (the float32 exponential's rounding). Tokens more than ~87 logits below the
    best one get probability 0 (float32 underflow).
    """
    np.subtract(logits, logits.max(), out=scratch)
    np.exp(scratch, out=scratch)
    out[:] = scratch
    out *= 1.0 / out.sum()
    return out


_GGML_LOG_LEVEL_ERROR = 4


def _silence_logs(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    """llama.cpp log callback that prints errors to stderr and drops everything else."""
    if level == _GGML_LOG_LEVEL_ERROR:
        print(text.decode("utf-8", "replace"), end="", file=sys.stderr, flush=True)


_LOG_CALLBACK = llama_cpp.llama_log_callback(_silence_logs)


def _init_backend(verbose: bool) -> None:
    if not verbose:
        llama_cpp.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))
    llama_cpp.llama_backend_init()


class LlamaCppModel:
    """A GGUF causal LM with a reusable llama.cpp KV cache: ``next_dist``, block ``score`` and
    ``score_tree``.

    Parameters
    ----------
    path
        A GGUF file, memory-mapped as is.
    n_threads
        CPU threads for one-token and batch decoding (default: all cores).
    n_ctx
        The context window (KV cache size); default ``min(trained context, 4096)``.
    max_tree_leaves
        The most leaves a tree passed to :meth:`score_tree` may have.
    verbose
        Let llama.cpp print its load and timing logs.
    """

    def __init__(
        self,
        path: str | Path,
        n_threads: int | None = None,
        n_ctx: int | None = None,
        max_tree_leaves: int = DEFAULT_TREE_LEAVES,
        verbose: bool = False,
    ) -> None:
        file = Path(path).expanduser()
        if not file.is_file():
            raise ValueError(f"no GGUF model file at {file}")
        _init_backend(verbose)
        model_params = llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = 0
        model_params.load_mode = llama_cpp.LLAMA_LOAD_MODE_MMAP
        self._model = llama_cpp.llama_model_load_from_file(str(file).encode(), model_params)
        if not self._model:
            raise ValueError(f"llama.cpp could not load {file} as a GGUF model")
        self.path = file
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.vocab_size = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        trained = int(llama_cpp.llama_model_n_ctx_train(self._model))
        self.context_window = int(n_ctx or min(trained, DEFAULT_MAX_CTX))
        self.n_threads = int(n_threads or os.cpu_count() or 1)
        self.max_tree_leaves = int(max_tree_leaves)
        self._ctx = self._new_context()
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(self.context_window, 0, self.max_tree_leaves + 1)
        self._scratch = np.empty(self.vocab_size, dtype=np.float32)
        self.exact_block_size = exact_block_size()
        self.stats = ForwardStats()
        self._cached: list[int] = []

    def _new_context(self) -> llama_cpp.llama_context_p:
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = params.n_batch = self.context_window
        params.n_seq_max = self.max_tree_leaves + 1
        params.n_outputs_max = max(params.n_batch, params.n_seq_max)  # llama.cpp asserts this
        params.kv_unified = True  # one cache shared by all sequences (tree paths share a prefix)
        params.n_threads = params.n_threads_batch = self.n_threads
        params.no_perf = True
        ctx = llama_cpp.llama_init_from_model(self._model, params)
        if not ctx:
            raise ValueError(f"llama.cpp could not create a context of {self.context_window}")
        return ctx

    def close(self) -> None:
        """Free the llama.cpp batch, context and model (the object is unusable afterwards)."""
        if getattr(self, "_ctx", None):
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if getattr(self, "_model", None):
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:
        self.close()

    @property
    def cached_tokens(self) -> list[int]:
        """The tokens whose keys and values the cache holds (a copy)."""
        return list(self._cached)

    @property
    def cache_length(self) -> int:
        """How many positions the KV cache itself holds for the sequence (0 when empty)."""
        return int(llama_cpp.llama_memory_seq_pos_max(self._memory, 0)) + 1

    def reset(self) -> None:
        """Drop the KV cache (the next call re-reads its whole prefix)."""
        llama_cpp.llama_memory_clear(self._memory, True)
        self._cached = []

    def check_fits(self, n_prompt: int, n_new: int = 0) -> None:
        """Raise ``ValueError`` unless a prompt of ``n_prompt`` tokens plus ``n_new`` fits."""
        if n_prompt < 1:
            raise ValueError("the prompt is empty: a causal LM needs at least one token")
        if n_prompt + n_new > self.context_window:
            raise ValueError(
                f"prompt ({n_prompt} tokens) plus {n_new} new tokens exceeds the model's context "
                f"window of {self.context_window} tokens"
            )

    def next_dist(self, prefix: Sequence[int]) -> np.ndarray:
        """The distribution (float64, shape (V,)) of the token after ``prefix``."""
        return self._dists(list(prefix), 1)[0]

    def score(self, prefix: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        """Rows i = 0..len(tokens): the distribution after ``prefix + tokens[:i]``, in one pass."""
        return self._dists(list(prefix) + list(tokens), len(tokens) + 1)

    def _dists(self, sequence: list[int], n_rows: int) -> np.ndarray:
        """Probabilities after each of the last ``n_rows`` prefixes of ``sequence``."""
        start = time.perf_counter()
        self.check_fits(len(sequence) - n_rows + 1, n_rows - 1)
        keep = self._trim(min(_common_prefix(self._cached, sequence), len(sequence) - n_rows))
        new = sequence[keep:]
        self._check_ids(new)
        for i, token in enumerate(new):
            self._put(i, token, keep + i, (0,), i >= len(new) - n_rows)
        self._decode(len(new), start)
        self._cached.extend(new)
        return self._read_rows(n_rows)

    def score_tree(
        self, prefix: Sequence[int], tokens: Sequence[int], parents: Sequence[int]
    ) -> np.ndarray:
        """Rows: the distribution after ``prefix`` (row 0) and after each node of a token tree
        (row i + 1), in ONE ``llama_decode``.

        The nodes (breadth-first; ``parents[i]`` is node i's parent, -1 for the prefix) are fed
        after the prefix. Each root-to-leaf path is a sequence id sharing the cached prefix, and
        each node belongs to the sequences of the leaves below it, at position
        ``len(prefix) - 1 + depth``; so it attends to the prefix and its ancestors only, and its
        row equals scoring its path as a plain sequence up to kernel rounding. Afterwards the path
        sequences are removed: the cache holds the prefix, and the next call feeds whichever
        tokens were accepted.
        """
        prefix, tokens = list(prefix), list(tokens)
        start = time.perf_counter()
        node_seqs, depths = _path_sequences(parents)
        n_paths = max((max(s) for s in node_seqs), default=0)
        if n_paths > self.max_tree_leaves:
            raise ValueError(
                f"the tree has {n_paths} leaves; this model was opened with "
                f"max_tree_leaves={self.max_tree_leaves}"
            )
        self.check_fits(len(prefix), len(tokens))  # every node takes a KV cell for this pass
        keep = self._trim(min(_common_prefix(self._cached, prefix), len(prefix) - 1))
        new = prefix[keep:]
        self._check_ids(new + tokens)
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
        return len(self._cached)

    def _check_ids(self, ids: list[int]) -> None:
        if min(ids) < 0 or max(ids) >= self.vocab_size:
            raise ValueError(f"token ids must lie in [0, {self.vocab_size}), got {ids}")

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


def _common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists (C-speed in the usual case)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]: bisect on list equality
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class LlamaCppTokenizer:
    """llama.cpp's own tokenizer for a loaded model, so text needs no transformers install."""

    def __init__(self, model: LlamaCppModel) -> None:
        self._model = model  # keeps the vocabulary's owner alive
        self._vocab = model._vocab
        self.vocab_size = model.vocab_size
        self.eog_ids = frozenset(
            t for t in range(self.vocab_size) if llama_cpp.llama_vocab_is_eog(self._vocab, t)
        )

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Token ids of ``text``; ``add_special`` adds BOS/EOS where the model asks for them,
        ``parse_special`` turns special-token text such as ``<|im_start|>`` into its id."""
        data = text.encode("utf-8")
        capacity = len(data) + 8
        while True:
            buffer = (llama_cpp.llama_token * capacity)()
            n = llama_cpp.llama_tokenize(
                self._vocab, data, len(data), buffer, capacity, add_special, parse_special
            )
            if n >= 0:
                return list(buffer[:n])
            capacity = -n

    def piece(self, token: int, special: bool = False) -> bytes:
        """The bytes of one token (special tokens render as empty unless ``special``)."""
        size = 32
        while True:
            buffer = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buffer, size, 0, special)
            if n >= 0:
                return buffer.raw[:n]
            size = -n

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """The text of ``ids`` (invalid UTF-8 from a cut multi-byte character is replaced)."""
        data = b"".join(self.piece(t, special=not skip_special_tokens) for t in ids)
        return data.decode("utf-8", "replace")

    @property
    def chat_template(self) -> str | None:
        """The model's Jinja chat template from its GGUF metadata, if it has one."""
        template = llama_cpp.llama_model_chat_template(self._model._model, None)
        return template.decode("utf-8") if template else None


def load_model(
    path: str | Path, n_threads: int | None = None, n_ctx: int | None = None
) -> LlamaCppModel:
    """Memory-map a GGUF file for CPU inference (see :class:`LlamaCppModel`)."""
    return LlamaCppModel(path, n_threads=n_threads, n_ctx=n_ctx)


def load_tokenizer(model: LlamaCppModel) -> LlamaCppTokenizer:
    """The tokenizer stored in the model's GGUF file."""
    return LlamaCppTokenizer(model)
