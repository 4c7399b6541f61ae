"""A Hugging Face transformers causal LM behind the :class:`spec_decode.core.models.Model`
interface.

The interface is stateless (every call passes the full prefix), but re-running a prefix on every
call would cost a whole prompt per token. :class:`TransformersModel` therefore keeps one KV cache
plus the list of tokens it covers. On each call it finds the longest common prefix of the cached
tokens and the requested sequence, crops the cache to it (to at most ``len(prefix) - 1``, so the
last committed token is fed again and its logits come out), and feeds the rest in ONE forward
call. For speculative decoding this means:

* the target scores the last committed token plus all k drafted tokens in one pass;
* after verification, the next call crops both caches back to the accepted length by itself;
* after a bonus token, the draft is brought level by feeding its two missing tokens in one call.

The adapter returns the raw next-token distribution softmax(logits) in float64: temperature,
top-k, top-p and min-p are applied by the sampler, identically for draft and target.

**Greedy identity by construction (near-ties).** A row scored inside a block is not bitwise the
row target-only decoding computes: target-only decoding feeds the prompt in one call and then one
token per call, and the CPU matrix kernels round differently for a block of rows than for one
(the block's keys and values differ in the same way, so later rows inherit it). The difference
is small; :data:`BLOCK_TOLERANCE` states a bound on how far it moves the difference of any two
logits of a row. A greedy choice can therefore flip only where the top two logits of a row are
within that tolerance. At such a *near-tie* the adapter re-scores the row exactly as target-only
decoding computes it, on a second KV cache (the *replica*) that it only ever extends the way
target-only decoding does: the prompt in one call (the first call after :meth:`reset` reads it),
then one token per call, catching up lazily from where it stopped; the row returned is then
bitwise target-only's. Greedy speculative output is thus token-identical to greedy target-only
decoding from an empty cache, near-ties included, the counterpart of the llama.cpp backend's
``exact_blocks``. Its price: a near-tie costs one one-token call per token between where the
replica stands and the row (it follows the drafts, and is cut back after a rejection), so a run
pays at most about one target-only run plus the drafted tokens of the blocks with a near-tie;
rare near-ties cost nothing elsewhere. The replica's work is counted apart in
:class:`~spec_decode.backends.prefix_cache.ForwardStats` (``rescored_rows``, ``rescore_calls``,
``rescore_tokens_fed``, ``rescore_s``). Rows that are already target-only's (every
row of target-only decoding itself) are never re-scored. Sampled decoding under the coupled rule
gets the same guarantee from the core: a row whose noisy choice could flip within the tolerance
is replaced by :meth:`TransformersModel.exact_dist`, the row re-scored the same way
(:mod:`spec_decode.core.near_ties`; counted in ``settled_rows``), so per-seed identity holds at
any temperature and with top-k, top-p and min-p too. Off with ``exact_ties=False``, and off
where no tolerance is stated: int8 linear layers (their shared activation scale moves block rows
far more; fine for a draft) and CUDA (unmeasured).

**Sliding-window attention.** A model whose layers attend to a sliding window (or chunks) of W
tokens keeps at most W - 1 keys per layer once W tokens have passed, and such a cache cannot be
cut back after a rejected draft (transformers raises in ``crop``). Within W tokens the window
changes nothing: every token sees the whole sequence. The adapter therefore takes W as its
context window (:attr:`TransformersModel.sliding_window`), so :meth:`check_fits` refuses, up
front and with a ``ValueError`` naming the window, any generation that would not fit inside it;
the one cache state that cannot be cut (exactly W tokens fed) is dropped and re-read instead.

Pinned and tested with transformers 5.24.0 (the ``cache=`` argument of 5.x; ``past_key_values``
is its deprecated name).
"""

from spec_decode.backends.transformers.model import (
    BLOCK_TOLERANCE,
    TransformersModel,
    stated_block_tolerance,
)
from spec_decode.backends.transformers.tokenizer import check_pair, load_tokenizer
from spec_decode.backends.transformers.weights import DEVICES, load_model

__all__ = [
    "BLOCK_TOLERANCE",
    "DEVICES",
    "TransformersModel",
    "check_pair",
    "load_model",
    "load_tokenizer",
    "stated_block_tolerance",
]
