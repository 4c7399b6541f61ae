"""A GGUF model run by llama.cpp behind the :class:`spec_decode.core.models.Model` interface.

The model file is read as it is (quantized weights included, no conversion; into memory rather
than memory-mapped, so a change to the file cannot reach a running model) and driven
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
  work slower);
* ``LLAMAFILE`` off, ``REPACK`` on (``CMAKE_ARGS="-DGGML_LLAMAFILE=OFF"``): blocks of 2-3 tokens
  are bitwise equal, one-token speed unchanged; the repacked Q4 kernels handle rows in groups of
  four, so blocks of 4 or more may differ;
* ``LLAMAFILE`` on (the default wheel): no block size is guaranteed equal;
* the exact-rows build (``spec-decode build-kernels``, loaded once built: see
  :mod:`~spec_decode.backends.llamacpp.library`; llamafile on, its tinyBLAS taking f16 at every
  row count): blocks of up to 64 tokens are bitwise equal; the library says so itself
  (``spec_decode_exact_rows()``).

:attr:`LlamaCppModel.exact_block_size` states that bound for the loaded library. Beyond it the rows
differ by kernel rounding carried through every layer, which is not small (BENCHMARKS.md, "Cost
curve and block/one-token agreement"; ``bench/kernels/llamacpp_agreement.py``). The keys and values
a block writes differ in the same way, so later rows inherit the difference. Speculative decoding
therefore reproduces target-only decoding bitwise when every target pass feeds at most
``exact_block_size`` tokens (k + 1 for a chain, 1 + the nodes for a tree). With longer blocks each
step is still exact for the rows the target pass returned, but those rows are not the one-token
rows, so the output can differ from target-only decoding by about that much per token. (Repacking
applies only to the weight formats it supports, such as Q4_0, Q4_K and IQ4_NL; float32 weights
always take the plain path.) The price of turning llamafile off on a stock build is block speed
(BENCHMARKS.md).

Tree scoring: :meth:`LlamaCppModel.score_tree` feeds all nodes of a token tree in ONE
``llama_decode``. Each root-to-leaf path is its own sequence id (1, 2, ...) sharing the cached
prefix (``llama_memory_seq_cp`` from sequence 0); a node carries the ids of every leaf below it
and the position ``len(prefix) - 1 + depth``, so llama.cpp's attention mask lets it see the
prefix and its ancestors only. This needs a unified KV cache (``kv_unified``) and
``n_seq_max = 1 + max_tree_leaves``; afterwards the path sequences are removed again and the
cache holds the prefix alone.

Pinned and tested with llama-cpp-python 0.3.36.

Importing this package loads no library: :func:`~spec_decode.backends.llamacpp.library.load`
chooses llama.cpp's libraries when the first model is loaded (the names below are imported on
first use).
"""

from importlib import import_module

_EXPORTS = {
    "LlamaCppModel": "model",
    "load_model": "model",
    "LlamaCppTokenizer": "tokenizer",
    "check_pair": "tokenizer",
    "load_tokenizer": "tokenizer",
    "build_features": "kernels",
    "exact_block_size": "kernels",
    "probabilities": "kernels",
    "open_slots": "slots",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
