"""The engine: a target (and a draft, when it can pay) loaded once, serving any number of
generations.

:meth:`Engine.load` chooses the backend, loads the target, reads this machine's cost curve once
(measuring it the first time, :mod:`spec_decode.backends.calibration`) and loads the draft model
only when the auto policy could ever choose it on that curve (:func:`draft_may_pay`).
:meth:`Engine.generate` then runs one generation: token ids in (:meth:`Engine.encode` and
:meth:`Engine.encode_chat` make them from text or chat messages), sampling controls, a token
limit, a seed, stop strings, a callback with each step's tokens and released text, and a
cancellation check before every step; out a :class:`Completion`.

Across requests the engine keeps two things, and neither may change what a request emits:

* The models' KV caches. The next request that shares a prefix with the last sequence (the next
  turn of a conversation) reads only what is new, but only as far as a cold run would have
  computed the reused rows the same way: llama.cpp's kernels give a row different bits when it
  is computed among a different number of rows, and a cold run reads the whole prompt in one
  call. :meth:`~spec_decode.backends.llamacpp.LlamaCppModel.keep_reusable` keeps only a prefix
  computed in calls this build computes batch-invariantly and leaves enough of the prompt to
  read that it is read the same way; a backend without it starts every request cold.
* The shared :class:`~spec_decode.drafting.suffix.SuffixHistory`: every finished request's
  sequence is added, and later requests' suffix drafter continues from it. Greedy output does
  not depend on what was drafted; a sampled request does, through which random draws the steps
  consume, so a request with both a seed and a temperature above 0 does not read the history:
  its output is then a function of its own input and seed alone, as the same request run alone.

One engine runs one generation at a time (llama.cpp contexts are not thread-safe); the server
gives it a thread of its own (:mod:`spec_decode.serving.worker`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from spec_decode.backends.calibration import (
    MAX_BLOCK,
    cached_draft_seconds,
    cost_curve,
    identity,
    pass_seconds,
)
from spec_decode.backends.cores import available_cores
from spec_decode.backends.loading import (
    Loaded,
    check_pair,
    check_weights,
    choose_backend,
    load,
    resolve_gguf,
)
from spec_decode.backends.prompts import encode_chat, encode_prompt
from spec_decode.backends.registry import DEFAULT_DRAFT, DEFAULT_TARGET
from spec_decode.core.generate import (
    ONLY,
    PolicyPlanner,
    StepFunction,
    generate,
    target_step,
    tree_step,
)
from spec_decode.core.randomness import RandomSource
from spec_decode.core.sampling import SamplingParams
from spec_decode.core.trace import Step, Trace
from spec_decode.core.tree import TreeShape
from spec_decode.drafting.auto import auto_planner, draft_model_can_pay, suffix_drafter
from spec_decode.drafting.costs import CostCurve
from spec_decode.drafting.lookup import PromptLookupDrafter
from spec_decode.drafting.policies import POLICY_NAMES, policy_by_name
from spec_decode.drafting.rule_choice import DEFAULT_RULE, RuleChoice, rule_by_name
from spec_decode.drafting.suffix import SuffixDrafter, SuffixHistory
from spec_decode.serving.text import IncrementalText

#: Why a generation ended: an end-of-generation token or a stop string, the token limit, or
#: the caller's cancellation.
FINISH_REASONS = ("stop", "length", "cancelled")
#: ``draft`` values that load no draft model: prompt lookup, and target-only decoding.
LOOKUP, NO_DRAFT = "lookup", "none"

#: The most tokens a step drafts by default (the auto policy may draft more: :func:`default_k`).
DEFAULT_K = 4

#: Called after every step with the tokens it emitted and the text that became final.
StepCallback = Callable[[list[int], str], None]


@dataclass(frozen=True)
class EngineConfig:
    """What to load and how to draft (the options of ``spec-decode generate`` and ``serve``).

    ``target`` and ``draft`` are packaged model names, GGUF files or transformers folders;
    ``draft`` may also be ``"lookup"`` (prompt lookup, no draft model) or ``"none"``
    (target-only). ``policy`` is ``"auto"`` (drafter and k from the cost curve; ``k`` is the
    most it drafts) or a k policy name; ``tree`` drafts token trees of that shape instead.
    ``k`` None follows the target's build (:func:`default_k`).
    ``shared_history`` gives the auto policy's suffix drafter the finished requests;
    ``reuse_cache`` lets a request reuse the KV cache the previous one left.
    """

    target: str = DEFAULT_TARGET
    draft: str = DEFAULT_DRAFT
    backend: str = "auto"
    policy: str = "auto"
    k: int | None = None
    tree: TreeShape | None = None
    confidence: float = 0.0
    threads: int | None = None
    device: str = "cpu"
    target_weights: str = "fp16"
    draft_weights: str = "int8"
    shared_history: bool = True
    reuse_cache: bool = True
    rule: str = DEFAULT_RULE

    def __post_init__(self) -> None:
        if self.policy != "auto" and self.policy not in POLICY_NAMES:
            raise ValueError(
                f"unknown policy {self.policy!r}; choose auto, {', '.join(POLICY_NAMES)}"
            )
        if self.k is not None and self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if not 0 <= self.confidence <= 1:
            raise ValueError(f"confidence must lie in [0, 1], got {self.confidence}")
        if self.tree is not None and self.draft in (LOOKUP, NO_DRAFT):
            raise ValueError("--tree needs a draft model; prompt lookup proposes a single chain")
        if self.target_weights == "int8":
            raise ValueError("int8 target weights break block/one-token consistency; use fp16")
        rule_by_name(self.rule)  # an unknown rule is refused before anything loads
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")

    def checked_backend(self) -> str:
        """The backend these models load on, once both weight formats are checked for it
        (``ValueError`` before anything loads or converts)."""
        backend = choose_backend(self.backend, self.target)
        for weights in (self.target_weights, self.draft_weights):
            check_weights(backend, weights, self.device)
        return backend

    def load(self, backend: str, name: str, weights: str) -> Loaded:
        """Load the target or the draft ``name`` with these threads and this device."""
        return load(backend, name, weights=weights, threads=self.threads, device=self.device)

    @property
    def uses_auto(self) -> bool:
        """Whether the auto policy chooses the drafter and k (it needs the cost curve)."""
        return self.policy == "auto" and self.tree is None and self.draft != NO_DRAFT


@dataclass
class Completion:
    """One finished generation.

    ``tokens`` are every emitted token (an end-of-generation token included); ``text`` their
    text, cut before a stop string; ``finish_reason`` one of :data:`FINISH_REASONS`;
    ``cached_tokens`` how many prompt tokens were reused from the previous request's KV cache;
    ``seconds`` the generation's wall time, ``first_step_seconds`` that of its first step (the
    prompt read plus one target pass; 0 when none ran).
    """

    tokens: list[int]
    text: str
    finish_reason: str
    prompt_tokens: int
    cached_tokens: int
    trace: Trace
    seconds: float
    first_step_seconds: float = 0.0

    def figures(self) -> dict[str, object]:
        """Every reported figure of this generation, for JSON output."""
        trace = self.trace
        return {
            "text": self.text,
            "token_ids": trace.tokens,
            "tokens": len(trace.tokens),
            "finish_reason": self.finish_reason,
            "seconds": self.seconds,
            "tokens_per_second": len(trace.tokens) / self.seconds if self.seconds else 0.0,
            **speculative_figures(trace),
        }


def speculative_figures(trace: Trace) -> dict[str, Any]:
    """What drafting did in one generation: target passes (plain ones apart), drafted and
    accepted tokens, acceptance rate, tokens per pass, steps by drafter ("": a plain target pass)
    and the drafted blocks by length. A ratio with nothing to divide by (nothing drafted, no
    pass) is None, which JSON can carry."""
    blocks = Counter(length for length in trace.drafted_lengths if length)
    return {
        "target_passes": trace.target_passes,
        "plain_passes": trace.target_passes - sum(blocks.values()),
        "blocks_by_length": {str(length): count for length, count in sorted(blocks.items())},
        "proposed": trace.proposed,
        "accepted": trace.accepted,
        "acceptance_rate": trace.acceptance_rate if trace.proposed else None,
        "tokens_per_pass": trace.tokens_per_pass if trace.target_passes else None,
        "steps_by_drafter": dict(Counter(trace.drafter_names)),
    }


class _Halt(Exception):
    """Raised by a step to end a generation early, carrying the trace so far."""

    def __init__(self, trace: Trace, reason: str) -> None:
        super().__init__(reason)
        self.trace, self.reason = trace, reason


@dataclass
class Engine:
    """A loaded target (and draft) with its cost curve, shared history and warm KV caches.

    Build it with :meth:`load`. ``k`` is the most tokens a step drafts: ``config.k``, or
    :func:`default_k` for the loaded target. Generations run one at a time: a lock serialises
    callers.
    """

    config: EngineConfig
    target: Loaded
    draft: Loaded | None
    costs: CostCurve | None
    k: int
    history: SuffixHistory = field(default_factory=SuffixHistory)
    #: The auto planner's suffix drafters, with and without the history, kept across requests:
    #: a follow-up turn's prompt extends the last context, so only its new tokens are indexed.
    _suffix: dict[bool, SuffixDrafter] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def load(cls, config: EngineConfig) -> Engine:
        """Load the target, read (or measure) the cost curve, and load the draft model unless
        the auto policy could never choose it on this machine (``ValueError`` or
        ``FileNotFoundError`` for a bad model or combination)."""
        backend = config.checked_backend()
        target = config.load(backend, config.target, config.target_weights)
        costs = cost_curve(backend, target.model) if config.uses_auto else None
        k = config.k or default_k(target.model, config.uses_auto)
        wants_model = config.draft not in (LOOKUP, NO_DRAFT)
        if wants_model and costs is not None:
            wants_model = draft_may_pay(backend, config.draft, config.threads, costs, k)
        draft = None
        if wants_model:
            draft = config.load(backend, config.draft, config.draft_weights)
            check_pair(target, draft)
            if costs is not None:
                seconds = pass_seconds(backend, draft.model, max_block=1)[0][0]
                costs = dataclasses.replace(costs, draft_seconds=seconds)
        return cls(config, target, draft, costs, k)

    @property
    def backend(self) -> str:
        return self.target.backend

    @property
    def tokenizer(self) -> Any:
        return self.target.tokenizer

    @property
    def models(self) -> list[Any]:
        """The loaded models: the target, then the draft if it was loaded."""
        return [self.target.model] + ([self.draft.model] if self.draft else [])

    @property
    def context_window(self) -> int:
        return int(self.target.model.context_window)

    def encode(self, text: str, raw: bool = False) -> list[int]:
        """Token ids of a prompt: through the chat template as one user message unless ``raw``
        or the model has none."""
        return encode_prompt(self.tokenizer, text, raw)

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of a conversation through the model's chat template, ready for the
        assistant's answer."""
        return encode_chat(self.tokenizer, messages)

    def check_fits(self, n_prompt: int, max_tokens: int) -> None:
        """``ValueError`` unless a prompt of ``n_prompt`` tokens plus ``max_tokens`` fits every
        loaded model's context window."""
        for model in self.models:
            model.check_fits(n_prompt, max_tokens)

    def warm_up(self) -> None:
        """One untimed forward per model: pages the weights in before anything is timed."""
        for model in self.models:
            model.next_dist([0])

    def forget(self) -> None:
        """Drop every KV cache: the next request reads its whole prompt, as a fresh process."""
        for model in self.models:
            model.reset()

    def generate(
        self,
        prompt: Sequence[int],
        max_tokens: int,
        *,
        sampling: SamplingParams | None = None,
        seed: int | None = None,
        stop: Sequence[str] = (),
        on_step: StepCallback | None = None,
        cancel: Callable[[], bool] | threading.Event | None = None,
        target_only: bool = False,
        rule: str | None = None,
    ) -> Completion:
        """Generate up to ``max_tokens`` tokens after the token ids ``prompt``.

        Ends after an end-of-generation token or once a ``stop`` string appears in the text
        (``finish_reason`` "stop"), after ``max_tokens`` ("length"), or before the first step
        after ``cancel`` returned True or was set ("cancelled"). ``seed`` None draws a fresh
        one. ``on_step`` is called after every step with its tokens and the text they made final
        (the last piece comes with no tokens). ``target_only`` decodes without drafting.
        """
        ids = [int(t) for t in prompt]
        if not ids:
            raise ValueError("the prompt is empty: a causal LM needs at least one token")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        vocab = self.target.model.vocab_size
        if min(ids) < 0 or max(ids) >= vocab:
            raise ValueError(f"token ids must lie in [0, {vocab})")
        self.check_fits(len(ids), max_tokens)
        text = IncrementalText(self.tokenizer, stop)
        sampling = sampling or SamplingParams()
        choice = rule_by_name(rule or self.config.rule)
        # under the coupled rule the drafts (and so the history) never change the output
        reads_history = choice.coupled or sampling.temperature == 0 or seed is None
        is_cancelled = cancel.is_set if isinstance(cancel, threading.Event) else cancel
        with self._lock:
            step = self._step(sampling, target_only, reads_history, choice)
            halting = _halting(step, lambda: _halt_reason(text, is_cancelled))
            cached = self._prepare_caches(ids)

            first_step: list[float] = []

            def on_tokens(tokens: list[int]) -> None:
                if not first_step:
                    first_step.append(time.perf_counter() - start)
                piece = text.add(tokens)
                if on_step is not None:
                    on_step(tokens, piece)

            start = time.perf_counter()
            try:
                trace = generate(
                    self.target.model,
                    halting,
                    ids,
                    max_tokens,
                    choice.source(seed),
                    on_tokens=on_tokens,
                    stop_tokens=self.target.stop_ids,
                )
                ended = trace.tokens and trace.tokens[-1] in self.target.stop_ids
                reason = "stop" if ended or text.stopped else "length"
            except _Halt as halt:
                trace, reason = halt.trace, halt.reason
            seconds = time.perf_counter() - start
            last = text.finish()
            if on_step is not None and last:
                on_step([], last)
            if trace.tokens and self.config.shared_history:
                self.history.add(ids + trace.tokens)
        first = first_step[0] if first_step else 0.0
        return Completion(trace.tokens, text.text, reason, len(ids), cached, trace, seconds, first)

    def _prepare_caches(self, prompt: list[int]) -> int:
        """Keep what each model's cache may reuse for ``prompt`` (nothing without
        ``reuse_cache`` or a backend that cannot say); return the target's kept length."""
        kept = []
        for model in self.models:
            keep = getattr(model, "keep_reusable", None)
            if self.config.reuse_cache and keep is not None:
                kept.append(keep(prompt))
            else:
                model.reset()
                kept.append(0)
        return kept[0]

    def _step(
        self, sampling: SamplingParams, target_only: bool, history: bool, choice: RuleChoice
    ) -> StepFunction:
        """The step function of one request: target-only, auto, a token tree or a chain."""
        config, target = self.config, self.target.model
        if target_only or config.draft == NO_DRAFT:
            return target_step(target, sampling)
        draft = self.draft.model if self.draft is not None else None
        if config.uses_auto:
            assert self.costs is not None  # loaded with the curve
            model = choice.model_drafter(draft, sampling, config.confidence) if draft else None
            shared = self.history if history and config.shared_history else None
            suffix = self._suffix.get(shared is not None)
            if suffix is None:
                suffix = suffix_drafter(self.costs, target.vocab_size, self.k, shared)
                self._suffix[shared is not None] = suffix
            suffix.begin_request()
            planner = auto_planner(
                self.costs, target.vocab_size, model, self.k, shared, suffix=suffix
            )
            return choice.planned_step(target, planner.drafters, planner, sampling)
        if config.tree is not None:
            drafter = choice.tree_drafter(draft, sampling)
            return tree_step(target, drafter, config.tree, choice.tree, sampling)
        if draft is None:
            chain = PromptLookupDrafter(target.vocab_size, max_tokens=self.k)  # k, not its 10
        else:
            chain = choice.model_drafter(draft, sampling, config.confidence)
        planner = PolicyPlanner(policy_by_name(config.policy, self.k))
        return choice.planned_step(target, {ONLY: chain}, planner, sampling)


def _halt_reason(text: IncrementalText, cancelled: Callable[[], bool] | None) -> str | None:
    """Why the next step must not run: a stop string appeared, or the caller cancelled."""
    if text.stopped:
        return "stop"
    if cancelled is not None and cancelled():
        return "cancelled"
    return None


def _halting(step: StepFunction, reason: Callable[[], str | None]) -> StepFunction:
    """``step``, refusing to run (raising :class:`_Halt` with the trace so far) once
    ``reason`` names one."""

    def halting(context: list[int], remaining: int, trace: Trace, source: RandomSource) -> Step:
        why = reason()
        if why is not None:
            raise _Halt(trace, why)
        return step(context, remaining, trace, source)

    return halting


def default_k(target: Any, auto: bool) -> int:
    """The most tokens a step drafts when not told: :data:`DEFAULT_K`, except under the auto
    policy on a target whose blocks score exactly beyond that (llama.cpp's exact-rows build):
    as many as the calibrated cost curve covers, since auto then only drafts that far where
    the curve says it pays."""
    exact = getattr(target, "exact_block_size", 1)
    if auto and exact > DEFAULT_K + 1:
        return min(exact, MAX_BLOCK) - 1
    return DEFAULT_K


def draft_may_pay(
    backend: str, draft: str, threads: int | None, costs: CostCurve, k_max: int
) -> bool:
    """Whether the auto policy could ever draft with ``draft`` on this machine, judged before
    loading it from its cached per-token cost (llama.cpp; True when unknown or not believable,
    see :func:`~spec_decode.backends.calibration.cached_draft_seconds`: it is then loaded, timed
    and cached, so the next run knows)."""
    if backend != "llama.cpp":
        return True
    key = identity("llama.cpp", resolve_gguf(draft), threads or available_cores())
    seconds = cached_draft_seconds(key, costs)
    return seconds is None or draft_model_can_pay(costs, seconds, k_max)
