"""The transformers adapter itself: :class:`TransformersModel`, a causal LM with a reusable KV
cache, block scoring, near-tie re-scoring and tree scoring (see the package docstring)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import torch
from transformers import DynamicCache, PreTrainedModel

from spec_decode.backends.prefix_cache import ForwardStats, PrefixCachedModel, common_prefix
from spec_decode.backends.transformers.cpu_linear import PackedLinear
from spec_decode.core.errors import ContextTooLong

#: The most the difference of two logits of one row (= of two log-probabilities) moves between a
#: row scored in a block and the same row as target-only decoding computes it, on the CPU with
#: fp32 or fp16 linear layers (fp32 activations). Measured (rows of 1-8-token drafted blocks on
#: caches built by earlier blocks, against target-only decoding's rows; fp32 and fp16 alike):
#: 5.7e-6 on the 1-layer, 32-wide test models (10,000 blocks), 4.2e-6 on a random 4-layer,
#: 512-wide, 1,000-token Qwen2 over 200-token contexts (1 and 2 threads), 1.1e-4 on the same
#: with its output layer scaled 30x (logits of tens); the packaged 1.5B target agrees to ~1e-4.
#: It scales with the logits' size. Stated with a margin: a margin costs only re-scoring, too
#: small a bound costs greedy identity.
BLOCK_TOLERANCE = 1e-3


class TransformersModel(PrefixCachedModel):
    """A causal LM with a reusable KV cache, exposing ``next_dist`` and block ``score``.

    Parameters
    ----------
    model
        Any ``AutoModelForCausalLM`` (put in eval mode here).
    context_window
        The longest sequence the model may see; defaults to ``config.max_position_embeddings``,
        and never exceeds a sliding attention window (see the package docstring).
    exact_ties
        Re-score near-tied rows exactly as target-only decoding computes them, so greedy output
        is token-identical to target-only decoding (see the package docstring); needs a stated
        ``block_tolerance``.
    block_tolerance
        The bound on how far block scoring moves the difference of two logits of a row; None
        uses the stated one (:func:`stated_block_tolerance`: :data:`BLOCK_TOLERANCE` for fp32
        and fp16 linear layers on the CPU, none otherwise).

    Inputs are built on the model's device (``device``: where its parameters live) and the
    probabilities come back to the CPU as float64.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        context_window: int | None = None,
        exact_ties: bool = True,
        block_tolerance: float | None = None,
    ) -> None:
        self.model = model.eval()
        config = model.config.get_text_config(decoder=True)
        self.config = model.config
        self.vocab_size = int(model.get_output_embeddings().out_features)
        self.device = next(model.parameters()).device
        self.stats = ForwardStats()
        self._cache = DynamicCache(config=model.config)
        windows = [
            int(layer.sliding_window)
            for layer in self._cache.layers
            if getattr(layer, "is_sliding", False)
        ]
        #: The sliding (or chunked) attention window of the narrowest such layer, or None.
        self.sliding_window: int | None = min(windows) if windows else None
        window = int(context_window or config.max_position_embeddings)
        self.context_window = min(window, self.sliding_window or window)
        self._tolerance = (
            stated_block_tolerance(model) if block_tolerance is None else float(block_tolerance)
        )
        self.exact_ties = bool(exact_ties) and self._tolerance is not None
        self._cached: list[int] = []
        self._exact_upto = 0  # how many leading cache entries are target-only's own
        self._prompt: list[int] = []  # the committed part of the first call on an empty cache
        self._replica = DynamicCache(config=model.config)  # built the target-only way only
        self._replica_tokens: list[int] = []
        #: Logits of the last call's rows known to be target-only's, by context.
        self._known_exact: dict[tuple[int, ...], torch.Tensor] = {}

    @property
    def block_tolerance(self) -> float | None:
        """The bound on how far block scoring moves the difference of two logits of a row, while
        near-ties are re-scored (``exact_ties``); None otherwise. The coupled rule's step reads
        it to settle noisy near-ties with :meth:`exact_dist`
        (:mod:`spec_decode.core.near_ties`)."""
        return self._tolerance if self.exact_ties else None

    def exact_dist(self, context: Sequence[int]) -> np.ndarray:
        """The distribution after ``context`` exactly as target-only decoding computes it (on
        the replica; counted in ``stats.settled_rows``, and in ``stats.rescored_rows`` when
        re-scored). ``context`` must extend this run's
        prompt: the core asks for rows of the block it was just given. A row of that block
        already known to be target-only's (re-scored at a greedy near-tie, or a call target-only
        decoding itself makes) is returned without re-scoring."""
        self.stats.settled_rows += 1
        context = list(context)
        logits = self._known_exact.get(tuple(context))
        if logits is None:
            logits = self._exact_logits(context)
        return self._softmax(logits[None])[0]

    @property
    def cache_length(self) -> int:
        """How many positions the KV cache itself holds (equals ``len(cached_tokens)``)."""
        return self._cache.get_seq_length()

    def reset(self) -> None:
        """Drop the KV caches (the next call re-reads its whole prefix, as a new prompt)."""
        self._cache = DynamicCache(config=self.config)
        self._cached = []
        self._exact_upto = 0
        self._prompt = []
        self._known_exact = {}
        self._reset_replica()

    def _reset_replica(self) -> None:
        self._replica = DynamicCache(config=self.config)
        self._replica_tokens = []

    def check_fits(self, n_prompt: int, n_new: int = 0) -> None:
        """:class:`~spec_decode.core.errors.ContextTooLong` unless a prompt of ``n_prompt``
        tokens plus ``n_new`` fits in the context window (for a sliding-window model: inside the
        window)."""
        if n_prompt >= 1 and n_prompt + n_new > self.context_window == self.sliding_window:
            raise ContextTooLong(
                f"prompt ({n_prompt} tokens) plus {n_new} new tokens exceeds the model's sliding "
                f"attention window of {self.sliding_window} tokens: past it the model attends "
                "to the last tokens only and its KV cache cannot be cut back after a rejected "
                "draft, so this backend runs a sliding-window model only while the whole "
                "sequence fits inside the window"
            )
        super().check_fits(n_prompt, n_new)

    def _cut(self, cache: DynamicCache, tokens: list[int], keep: int) -> DynamicCache:
        """``cache`` (covering ``tokens``) cut back to its first ``keep`` tokens; a new empty cache
        (``tokens`` cleared) for ``keep = 0`` and when it holds a full sliding window, which
        cannot be cut (within a generation that fits the window this never happens)."""
        if keep >= len(tokens):
            return cache
        if keep == 0 or (self.sliding_window is not None and len(tokens) >= self.sliding_window):
            tokens.clear()
            return DynamicCache(config=self.config)
        cache.crop(keep - len(tokens))
        del tokens[keep:]
        return cache

    def _reuse(self, sequence: list[int], committed: int) -> int:
        """Cut the cache back to its common prefix with ``sequence`` (keeping at most
        ``committed - 1`` tokens, so the last committed token is fed again); return how many
        tokens it kept.

        A call whose committed part (``sequence[:committed]``) does not strictly extend the
        current prompt starts a new run, whose prompt it is: the first call after
        :meth:`reset` reads the prompt, and a later call on the prompt itself starts over.
        """
        prompt = self._prompt
        if not prompt or committed <= len(prompt) or sequence[: len(prompt)] != prompt:
            self._prompt = sequence[:committed]
            self._exact_upto = 0
            self._reset_replica()
        keep = min(common_prefix(self._cached, sequence), committed - 1)
        self._cache = self._cut(self._cache, self._cached, keep)
        keep = len(self._cached)
        self._exact_upto = min(self._exact_upto, keep)
        return keep

    def _forward(self, cache: DynamicCache, new: list[int], n_rows: int) -> torch.Tensor:
        """One plain causal forward call of ``new`` on ``cache``: the last ``n_rows`` logits."""
        with torch.inference_mode():
            out = self.model(
                input_ids=torch.tensor([new], dtype=torch.long, device=self.device),
                cache=cache,
                use_cache=True,
                logits_to_keep=n_rows,
            )
        return out.logits[0, -n_rows:]

    def score_tree(
        self, prefix: Sequence[int], tokens: Sequence[int], parents: Sequence[int]
    ) -> np.ndarray:
        """Rows: the distribution after ``prefix`` (row 0) and after each node of a token tree
        (row i + 1), in ONE forward pass.

        The nodes (breadth-first; ``parents[i]`` is node i's parent, -1 for the prefix) are fed
        after the prefix as one block. A 4D additive attention mask lets each node attend to the
        prefix and to its own ancestors only, and its position id is len(prefix) - 1 + its depth,
        so each row equals scoring that node's path as a plain sequence, up to float rounding
        (and near-tied rows are re-scored as target-only decoding computes them).
        The cache then holds the nodes in tree order, not one sequence, so it is cropped back to
        the prefix afterwards; the next call re-feeds whichever tokens were accepted. Under a
        sliding window every node takes a cache slot, so prefix and nodes must fit inside it.
        """
        prefix, tokens = list(prefix), list(tokens)
        depths: list[int] = []
        paths: list[list[int]] = []  # each node's path below the prefix
        for token, parent in zip(tokens, parents, strict=True):
            depths.append(1 if parent < 0 else depths[parent] + 1)
            paths.append(([] if parent < 0 else paths[parent]) + [token])
        start = time.perf_counter()
        self._known_exact = {}
        self.check_fits(len(prefix), len(tokens) if self.sliding_window else max(depths, default=0))
        keep = self._reuse(prefix, len(prefix))
        new = prefix[keep:] + tokens
        self.check_ids(new)
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
        self._cached.extend(new)  # the nodes, in tree order, until cut off
        self._cache = self._cut(self._cache, self._cached, len(prefix))
        self._exact_upto = min(self._exact_upto, keep, len(self._cached))
        logits = out.logits[0, -len(tokens) - 1 :]
        logits = self._settle_near_ties(
            logits, lambda row: prefix + ([] if row == 0 else paths[row - 1])
        )
        return self._softmax(logits)

    def _dists(self, sequence: list[int], n_rows: int) -> np.ndarray:
        """Probabilities after each of the last ``n_rows`` prefixes of ``sequence``."""
        start = time.perf_counter()
        self._known_exact = {}
        committed = len(sequence) - n_rows + 1
        self.check_fits(committed, n_rows - 1)
        keep = self._reuse(sequence, committed)
        new = sequence[keep:]
        self.check_ids(new)
        # target-only decoding's own calls: the prompt on an empty cache, then one token per
        # call on a cache built that way; their rows are target-only's and need no re-scoring
        exact = (
            n_rows == 1 and self._exact_upto == keep and (len(new) == 1 or sequence == self._prompt)
        )
        forward_start = time.perf_counter()
        self.stats.bookkeeping_s += forward_start - start
        logits = self._forward(self._cache, new, n_rows)
        self.stats.forward_s += time.perf_counter() - forward_start
        self.stats.calls += 1
        self.stats.tokens_fed += len(new)
        self._cached.extend(new)
        if exact:
            self._exact_upto = len(self._cached)
            self._known_exact[tuple(sequence)] = logits[0]
        else:
            logits = self._settle_near_ties(logits, lambda row: sequence[: committed + row])
        return self._softmax(logits)

    def _softmax(self, logits: torch.Tensor) -> np.ndarray:
        start = time.perf_counter()
        probs = torch.softmax(logits.double(), dim=-1).cpu().numpy()
        self.stats.softmax_s += time.perf_counter() - start
        return probs

    def _settle_near_ties(
        self, logits: torch.Tensor, context_of: Callable[[int], list[int]]
    ) -> torch.Tensor:
        """``logits`` with every near-tied row (top two logits within :attr:`block_tolerance`)
        replaced by the row target-only decoding computes after ``context_of(row)``.

        Elsewhere block scoring cannot change which token is largest: the tolerance bounds how
        far it moves the difference of any two logits.
        """
        if not self.exact_ties or logits.shape[-1] < 2:
            return logits
        top = torch.topk(logits, 2, dim=-1).values
        near = torch.nonzero(top[:, 0] - top[:, 1] <= self.block_tolerance).flatten().tolist()
        if not near:
            return logits
        logits = logits.clone()
        for row in near:
            context = context_of(row)
            logits[row] = self._exact_logits(context)
            self._known_exact[tuple(context)] = logits[row]
        return logits

    def _exact_logits(self, context: list[int]) -> torch.Tensor:
        """The logits after ``context`` exactly as target-only decoding computes them.

        They come from the replica cache, which only ever holds what target-only decoding's
        cache would: this run's prompt read in one call, then one token per call. It is cut back
        to its common prefix with ``context`` (never into the prompt) and catches up one token
        per call from there.
        """
        start = time.perf_counter()
        prompt = self._prompt
        if len(context) < len(prompt) or context[: len(prompt)] != prompt:
            raise RuntimeError("internal: a re-scored row does not extend the run's prompt")
        keep = min(common_prefix(self._replica_tokens, context), len(context) - 1)
        self._replica = self._cut(
            self._replica, self._replica_tokens, keep if keep >= len(prompt) else 0
        )
        done = len(self._replica_tokens)
        calls = [] if done else [prompt]
        calls += [[token] for token in context[max(done, len(prompt)) :]]
        for new in calls:
            logits = self._forward(self._replica, new, 1)
            self._replica_tokens.extend(new)
            self.stats.rescore_calls += 1
            self.stats.rescore_tokens_fed += len(new)
        self.stats.rescored_rows += 1
        self.stats.rescore_s += time.perf_counter() - start
        return logits[0]


def stated_block_tolerance(model: PreTrainedModel) -> float | None:
    """The block/one-token tolerance this backend states for ``model``: :data:`BLOCK_TOLERANCE`
    on the CPU with fp32 or fp16 linear layers; None (nothing stated) with int8 linear layers,
    whose activation scale is shared by the rows of a block, and on other devices (unmeasured).
    """
    if next(model.parameters()).device.type != "cpu":
        return None
    for module in model.modules():
        if isinstance(module, PackedLinear) and module.weight_format == "int8":
            return None
    return BLOCK_TOLERANCE
