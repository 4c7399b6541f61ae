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

Pinned and tested with transformers 5.24.0 (the ``cache=`` argument of 5.x; ``past_key_values``
is its deprecated name).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DynamicCache,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from spec_decode.backends.cpu_linear import pack_linears
from spec_decode.backends.prefix_cache import ForwardStats, PrefixCachedModel, common_prefix


class TransformersModel(PrefixCachedModel):
    """A causal LM with a reusable KV cache, exposing ``next_dist`` and block ``score``.

    Parameters
    ----------
    model
        Any ``AutoModelForCausalLM`` (put in eval mode here).
    context_window
        The longest sequence the model may see; defaults to ``config.max_position_embeddings``.

    Inputs are built on the model's device (``device``: where its parameters live) and the
    probabilities come back to the CPU as float64.
    """

    def __init__(self, model: PreTrainedModel, context_window: int | None = None) -> None:
        self.model = model.eval()
        config = model.config.get_text_config(decoder=True)
        self.config = model.config
        self.vocab_size = int(model.get_output_embeddings().out_features)
        self.device = next(model.parameters()).device
        self.context_window = int(context_window or config.max_position_embeddings)
        self.stats = ForwardStats()
        self._cache = DynamicCache(config=model.config)
        self._cached: list[int] = []

    @property
    def cache_length(self) -> int:
        """How many positions the KV cache itself holds (equals ``len(cached_tokens)``)."""
        return self._cache.get_seq_length()

    def reset(self) -> None:
        """Drop the KV cache (the next call re-reads its whole prefix)."""
        self._cache = DynamicCache(config=self.config)
        self._cached = []

    def score_tree(
        self, prefix: Sequence[int], tokens: Sequence[int], parents: Sequence[int]
    ) -> np.ndarray:
        """Rows: the distribution after ``prefix`` (row 0) and after each node of a token tree
        (row i + 1), in ONE forward pass.

        The nodes (breadth-first; ``parents[i]`` is node i's parent, -1 for the prefix) are fed
        after the prefix as one block. A 4D additive attention mask lets each node attend to the
        prefix and to its own ancestors only, and its position id is len(prefix) - 1 + its depth,
        so each row equals scoring that node's path as a plain sequence, up to float rounding.
        The cache then holds the nodes in tree order, not one sequence, so it is cropped back to
        the prefix afterwards; the next call re-feeds whichever tokens were accepted.
        """
        prefix, tokens = list(prefix), list(tokens)
        depths: list[int] = []
        for parent in parents:
            depths.append(1 if parent < 0 else depths[parent] + 1)
        start = time.perf_counter()
        self.check_fits(len(prefix), max(depths, default=0))
        keep = min(common_prefix(self._cached, prefix), len(prefix) - 1)
        if keep < len(self._cached):
            self._cache.crop(keep - len(self._cached))
            del self._cached[keep:]
        new = prefix[keep:] + tokens
        if min(new) < 0 or max(new) >= self.vocab_size:
            raise ValueError(f"token ids must lie in [0, {self.vocab_size}), got {new}")
        fed = len(prefix) - keep  # committed tokens fed again (at least the last one)
        visible = torch.ones(len(new), keep + len(new), dtype=torch.bool, device=self.device)
        visible[:, keep:] = torch.tril(visible[:, keep:])  # the prefix part: plain causal
        for i, parent in enumerate(parents):  # a node sees the prefix, its ancestors and itself
            row = visible[fed + i, keep + fed :]
            row[:] = False if parent < 0 else visible[fed + parent, keep + fed :]
            row[i] = True
        mask = torch.zeros(visible.shape, dtype=self.model.dtype, device=self.device)
        mask.masked_fill_(~visible, torch.finfo(self.model.dtype).min)
        positions = list(range(keep, len(prefix))) + [len(prefix) - 1 + d for d in depths]
        forward_start = time.perf_counter()
        self.stats.bookkeeping_s += forward_start - start
        with torch.inference_mode():
            out = self.model(
                input_ids=torch.tensor([new], dtype=torch.long, device=self.device),
                attention_mask=mask[None, None],
                position_ids=torch.tensor([positions], dtype=torch.long, device=self.device),
                cache=self._cache,
                use_cache=True,
                logits_to_keep=len(tokens) + 1,
            )
        self.stats.forward_s += time.perf_counter() - forward_start
        self.stats.calls += 1
        self.stats.tokens_fed += len(new)
        if tokens:
            self._cache.crop(-len(tokens))
        self._cached.extend(prefix[keep:])
        softmax_start = time.perf_counter()
        logits = out.logits[0, -len(tokens) - 1 :]
        probs = torch.softmax(logits.double(), dim=-1).cpu().numpy()
        self.stats.softmax_s += time.perf_counter() - softmax_start
        return probs

    def _dists(self, sequence: list[int], n_rows: int) -> np.ndarray:
        """Softmax of the logits at the last ``n_rows`` positions of ``sequence``."""
        logits = self._logits(sequence, n_rows)
        start = time.perf_counter()
        probs = torch.softmax(logits.double(), dim=-1).cpu().numpy()
        self.stats.softmax_s += time.perf_counter() - start
        return probs

    def _logits(self, sequence: list[int], n_rows: int) -> torch.Tensor:
        """Logits, shape (n_rows, V), after each of the last ``n_rows`` prefixes of ``sequence``."""
        start = time.perf_counter()
        self.check_fits(len(sequence) - n_rows + 1, n_rows - 1)
        keep = min(common_prefix(self._cached, sequence), len(sequence) - n_rows)
        if keep < len(self._cached):
            self._cache.crop(keep - len(self._cached))
            del self._cached[keep:]
        new = sequence[keep:]
        if min(new) < 0 or max(new) >= self.vocab_size:
            raise ValueError(f"token ids must lie in [0, {self.vocab_size}), got {new}")
        input_ids = torch.tensor([new], dtype=torch.long, device=self.device)
        forward_start = time.perf_counter()
        self.stats.bookkeeping_s += forward_start - start
        with torch.inference_mode():
            out = self.model(
                input_ids=input_ids, cache=self._cache, use_cache=True, logits_to_keep=n_rows
            )
        self.stats.forward_s += time.perf_counter() - forward_start
        self.stats.calls += 1
        self.stats.tokens_fed += len(new)
        self._cached.extend(new)
        return out.logits[0, -n_rows:]


#: The devices :func:`load_model` accepts.
DEVICES = ("cpu", "cuda")
#: Weight formats on CUDA: the GPU's own half-precision matrix kernels (no CPU packing).
_CUDA_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def load_model(path: str | Path, weights: str = "fp16", device: str = "cpu") -> TransformersModel:
    """Load a local transformers folder onto ``device`` with the given weight format.

    On the CPU ``weights`` is the linear-layer format: ``"fp16"`` (use for targets), ``"int8"``
    (cheapest; drafts only) or ``"fp32"``. On ``"cuda"`` the whole model is loaded in ``"bf16"``,
    ``"fp16"`` or ``"fp32"`` and runs on the GPU's kernels; whether block scores agree with
    one-token scores there is a property of those kernels, unmeasured here (no GPU was available).
    """
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; choose one of {', '.join(DEVICES)}")
    folder = _existing_folder(path)
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("device cuda requested but torch sees no CUDA device")
        if weights not in _CUDA_DTYPES:
            raise ValueError(f"on cuda, weights must be one of {', '.join(_CUDA_DTYPES)}")
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=_CUDA_DTYPES[weights])
        return TransformersModel(model.to("cuda"))
    # Read fp16 and pack each linear layer from it, so no full fp32 copy of the weights ever
    # exists; the remaining parameters (embeddings, norms) then compute in fp32.
    dtype = torch.float32 if weights == "fp32" else torch.float16
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
    return TransformersModel(pack_linears(model, weights).float())


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """Load the tokenizer saved in a local transformers folder."""
    return AutoTokenizer.from_pretrained(str(_existing_folder(path)))


def _existing_folder(path: str | Path) -> Path:
    folder = Path(path).expanduser()
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"no transformers model folder (with config.json) at {folder}")
    return folder


def check_pair(
    target: TransformersModel,
    draft: TransformersModel,
    target_tok: PreTrainedTokenizerBase | None = None,
    draft_tok: PreTrainedTokenizerBase | None = None,
) -> None:
    """Raise ``ValueError`` unless draft and target share a vocabulary (and tokenizer, if given).

    Speculative decoding compares distributions over the same token ids, so the output sizes
    must match and the tokenizers must map every string to the same ids.
    """
    if target.vocab_size != draft.vocab_size:
        raise ValueError(
            f"draft and target vocabularies differ: {draft.vocab_size} vs "
            f"{target.vocab_size} logits"
        )
    if target_tok is None or draft_tok is None:
        return
    if target_tok.get_vocab() != draft_tok.get_vocab():
        raise ValueError("draft and target tokenizers differ: their token-to-id maps are not equal")
    if target_tok.all_special_ids != draft_tok.all_special_ids:
        raise ValueError("draft and target tokenizers differ in their special tokens")
