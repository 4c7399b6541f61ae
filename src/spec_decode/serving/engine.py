"""The engine: a target (and a draft, when it can pay) loaded once, serving any generations.

:meth:`Engine.load` loads the target, reads the cost curve (measuring it the first time) and
loads the draft only when the auto policy could choose it; :meth:`Engine.prepare` makes a checked
:class:`~spec_decode.serving.request.GenerationRequest` from a prompt; :meth:`Engine.generate`
runs one, step by step, and returns a :class:`~spec_decode.serving.completion.Completion`.

Across requests the engine keeps two things, and neither may change what a request emits:

* The models' KV caches, one per slot. A request that shares a prefix with its slot's last
  sequence reads only what is new, as far as a cold run computes the reused rows bitwise the
  same (:meth:`~spec_decode.backends.llamacpp.LlamaCppModel.keep_reusable`); one that shares a
  longer prefix with a running request's prompt copies those cells (:mod:`.slots`).
* The shared :class:`~spec_decode.drafting.suffix.SuffixHistory`: every finished request's
  sequence is added, and later requests' suffix drafter continues from it. Greedy and coupled
  output do not depend on what was drafted; a sampled request under the standard rule does, so
  with a seed it reads no history: its output is its own input's and seed's alone.

A request's penalties, logit bias and grammar are processors (:mod:`spec_decode.core.processors`)
wrapped around both models for that request alone: every row the target scores, drafted rows
included, is processed with its own history, so the output stays target-only decoding's.

Requests run at once on slots (:mod:`.slots`); their models' calls meet on the engine's thread,
and their auto planners choose their blocks together, trading offers on the
:class:`~.step_board.StepBoard` (:mod:`spec_decode.drafting.shared_call`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from spec_decode.backends.loading import Loaded
from spec_decode.backends.prompts import (
    SerializedTokenizer,
    encode_chat,
    encode_prompt,
    prompt_ids,
)
from spec_decode.constraints.grammar import check_grammar, grammar_tokenizer
from spec_decode.core.errors import BadRequest
from spec_decode.core.generate import generate
from spec_decode.core.steps import StepFunction
from spec_decode.drafting.auto import AutoPlanner, auto_planner
from spec_decode.drafting.costs import CostCurve
from spec_decode.drafting.drafters import ModelDrafter
from spec_decode.drafting.rule_choice import RuleChoice, rule_by_name
from spec_decode.drafting.suffix import SuffixHistory
from spec_decode.serving.completion import Completion, Piece, StepCallback
from spec_decode.serving.config import EngineConfig
from spec_decode.serving.halting import Halt, halt_reason, halting_step
from spec_decode.serving.loader import load_models
from spec_decode.serving.logprobs import RowRecorder, TokenLogprob
from spec_decode.serving.request import GenerationRequest, RequestOptions
from spec_decode.serving.slots import IdleHistory, Slot, SlotTable, batching_refusal
from spec_decode.serving.step_board import StepBoard
from spec_decode.serving.steps import processed, request_step
from spec_decode.serving.text import IncrementalText


@dataclass
class Engine:
    """A loaded target (and draft) with its cost curve, shared history and warm KV caches.

    Build it with :meth:`load`. ``k`` is the most tokens a step drafts: ``config.k``, or
    :func:`default_k` for the loaded target. As many generations run at once as there are
    slots (:mod:`.slots`), each on a thread of its own; further callers wait for a slot.
    """

    config: EngineConfig
    target: Loaded
    draft: Loaded | None
    costs: CostCurve | None
    k: int
    history: SuffixHistory = field(default_factory=SuffixHistory)
    #: what loading decided that the user should hear (a draft set aside, and why)
    notes: tuple[str, ...] = ()
    slots: SlotTable = field(init=False, repr=False)
    _history: IdleHistory = field(init=False, repr=False)
    #: the running requests' offers for the next shared call, for each other's auto planners
    board: StepBoard = field(init=False, repr=False)
    _tokenizer: SerializedTokenizer = field(init=False, repr=False)
    _grammar_tokenizer: Any = field(default=None, init=False, repr=False)
    _grammar_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self._tokenizer = SerializedTokenizer(self.target.tokenizer)
        drafts = self.draft.slots if self.draft is not None else None
        between_calls = self.batchers[0].between_calls if self.batchers else None
        self.slots = SlotTable(self.target.slots[: self.n_slots], drafts, between_calls)
        self._history = IdleHistory(self.history)
        shared = self.batchers[0] if self.batchers else None  # one call's rows: one pass?
        self.board = StepBoard(shared.budget, shared.context.unified) if shared else StepBoard()

    @property
    def n_slots(self) -> int:
        """How many requests run at once: the target's slots (1 where batching them would not
        be exact for this model: see :func:`~.slots.batching_refusal`)."""
        return 1 if batching_refusal(self.target) else len(self.target.slots)

    @property
    def batchers(self) -> list[Any]:
        """What decodes the slots' calls together (none for one slot), to step on the engine's
        thread."""
        if self.n_slots == 1:
            return []
        return [m.batcher for m in (self.target, self.draft) if m is not None and m.batcher]

    @classmethod
    def load(cls, config: EngineConfig) -> Engine:
        """Load the models this configuration names (:func:`~.loader.load_models`)."""
        m = load_models(config)
        return cls(m.config, m.target, m.draft, m.costs, m.k, notes=m.notes)

    @property
    def backend(self) -> str:
        return self.target.backend

    @property
    def tokenizer(self) -> SerializedTokenizer:
        """The target's tokenizer, one call at a time from any thread."""
        return self._tokenizer

    @property
    def models(self) -> list[Any]:
        """The loaded models: the target, then the draft if it was loaded."""
        return self.slots.slots[0].models

    @property
    def context_window(self) -> int:
        return int(self.target.model.context_window)

    def encode(self, text: str, raw: bool = False) -> list[int]:
        """Token ids of a prompt: through the chat template as one user message unless ``raw``
        or the model has none."""
        return encode_prompt(self.tokenizer, text, raw)

    def encode_chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> list[int]:
        """Token ids of a conversation (and the ``tools`` the model may call) through the
        model's chat template, ready for the assistant's answer."""
        return encode_chat(self.tokenizer, messages, tools)

    def prepare(
        self,
        prompt: str | Sequence[Mapping[str, Any]] | Sequence[int],
        options: RequestOptions | None = None,
        *,
        max_tokens: int | None = None,
        limit: int | None = None,
        raw: bool = False,
        tools: list[dict[str, Any]] | None = None,
    ) -> GenerationRequest:
        """A checked :class:`~spec_decode.serving.request.GenerationRequest` for ``prompt``,
        decoded as ``options`` say: text (through the chat template as one user message unless
        ``raw``), chat messages (with the ``tools`` the model may call, OpenAI function
        definitions), or token ids. A grammar that does not compile is refused here.

        ``max_tokens`` None asks for as many tokens as the context window leaves, at most
        ``limit``; more than ``limit`` is refused. Every refusal is a
        :class:`~spec_decode.core.errors.BadRequest` naming the field. Safe to call from any
        thread while a generation runs (the tokenizer is serialized).
        """
        options = options or RequestOptions()
        ids = prompt_ids(self.tokenizer, prompt, raw=raw, tools=tools)
        if max_tokens is None:
            max_tokens = max(self.context_window - len(ids), 1)  # no room: refused below
            max_tokens = max_tokens if limit is None else min(max_tokens, limit)
        elif limit is not None and max_tokens > limit:
            raise BadRequest(
                f"max_tokens = {max_tokens} is above the limit of {limit} tokens a request",
                "max_tokens",
            )
        if options.grammar is not None:
            check_grammar(options.grammar, self.grammar_tokenizer)
        request = GenerationRequest(tuple(ids), max_tokens, options)
        self.validate(request)
        return request

    @property
    def grammar_tokenizer(self) -> Any:
        """llguidance's tokenizer for the target, built on first use (a pass over the
        vocabulary)."""
        with self._grammar_lock:
            if self._grammar_tokenizer is None:
                model = self.target.model
                self._grammar_tokenizer = grammar_tokenizer(
                    self.tokenizer, model.vocab_size, self.target.stop_ids
                )
            return self._grammar_tokenizer

    def validate(self, request: GenerationRequest) -> None:
        """Refuse a request this engine cannot run: a rule it does not know, token ids outside
        the vocabulary, or a prompt and token limit beyond a model's context window
        (:class:`~spec_decode.core.errors.BadRequest` s naming the field)."""
        options = request.options
        if options.rule is not None:
            try:
                rule_by_name(options.rule)
            except ValueError as error:
                raise BadRequest(str(error), "rule") from error
        for model in self.models:
            model.check_fits(len(request.prompt), request.max_tokens)
        self.target.model.check_ids(request.prompt)
        if options.logit_bias is not None:
            options.logit_bias.check_vocabulary(self.target.model.vocab_size)
        drafts_trees = self.config.tree is not None and not options.target_only
        if options.logprobs is not None and drafts_trees:
            raise BadRequest("logprobs are not reported under token trees (--tree)", "logprobs")

    def warm_up(self) -> None:
        """One untimed forward per model: pages the weights in before anything is timed."""
        for model in self.models:
            model.next_dist([0])

    def close(self) -> None:
        """Free the models now, once the last generation ended, rather than leave them to
        interpreter exit (shutdown: :meth:`~spec_decode.serving.worker.Worker.join`), where the
        app's reference cycle would free them after ``sys.meta_path`` is gone."""
        with self._grammar_lock:
            self._grammar_tokenizer = None
            for model in self._every_model():
                close = getattr(model, "close", None)
                if close is not None:
                    close()

    def forget(self) -> None:
        """Drop every KV cache: the next request reads its whole prompt, as a fresh process."""
        for model in self._every_model():
            model.reset()

    def _every_model(self) -> list[Any]:
        return [model for slot in self.slots.slots for model in slot.models]

    def generate(
        self,
        request: GenerationRequest,
        *,
        on_step: StepCallback | None = None,
        cancel: Callable[[], bool] | threading.Event | None = None,
    ) -> Completion:
        """Run ``request`` (:meth:`prepare` makes one; it is checked again here).

        Ends after an end-of-generation token (unless the request ignores them) or once a stop
        string appears in the text (``finish_reason`` "stop"), after ``request.max_tokens``
        ("length"), or before the first step after ``cancel`` returned True or was set
        ("cancelled"). ``on_step`` is called after every step with its
        :class:`~spec_decode.serving.completion.Piece`: its tokens, the text they made final (the
        last piece comes with no tokens) and, when the request asks for them, their
        log-probabilities, read from the rows the step decided on
        (:class:`~spec_decode.serving.logprobs.RowRecorder`).
        """
        self.validate(request)
        ids, options = list(request.prompt), request.options
        stop_ids = () if options.ignore_eos else self.target.stop_ids
        text = IncrementalText(self.tokenizer, options.stop)
        choice = self.config.rule_for(options)
        is_cancelled = cancel.is_set if isinstance(cancel, threading.Event) else cancel
        with (
            self.slots.take(ids, reuse=self.config.reuse_cache) as slot,
            self._history.request(),
            self.board.running(slot.index),
            self._member(),
        ):
            step, recorder = self._request_step(request, choice, slot)
            halting = halting_step(step, lambda: halt_reason(text, is_cancelled))
            cached = slot.kept

            first_step: list[float] = []
            logprobs: list[TokenLogprob] = []

            def on_tokens(tokens: list[int]) -> None:
                if not first_step:
                    first_step.append(time.perf_counter() - start)
                    self.slots.prompt_read(slot)
                entries = None
                if recorder is not None:
                    entries = recorder.take(len(ids) + len(logprobs), tokens)
                    logprobs.extend(entries)
                piece = Piece(tokens, text.add(tokens), entries)
                if on_step is not None:
                    on_step(piece)

            start = time.perf_counter()
            try:
                trace = generate(
                    slot.target,
                    halting,
                    ids,
                    request.max_tokens,
                    choice.source(options.seed),
                    on_tokens=on_tokens,
                    stop_tokens=stop_ids,
                )
                ended = bool(trace.tokens) and trace.tokens[-1] in stop_ids
                reason = "stop" if ended or text.stopped else "length"
            except Halt as halt:
                trace, reason, ended = halt.trace, halt.reason, False
            seconds = time.perf_counter() - start
            last = text.finish()
            if on_step is not None and last:
                on_step(Piece([], last))
            if trace.tokens and self.config.shared_history:
                self._history.add(ids + trace.tokens)
        first = first_step[0] if first_step else 0.0
        return Completion(
            trace.tokens, text.text, reason, len(ids), cached, trace, seconds, first,
            logprobs if recorder is not None else None, ended,
        )  # fmt: skip

    def _member(self) -> contextlib.AbstractContextManager[None]:
        """While a request runs: a member of the target's batcher, whose steps wait for its
        posts (:class:`~spec_decode.backends.llamacpp.slots.Batcher`; nothing with one slot)."""
        return self.target.batcher.member() if self.batchers else contextlib.nullcontext()

    def _request_step(
        self, request: GenerationRequest, choice: RuleChoice, slot: Slot
    ) -> tuple[StepFunction, RowRecorder | None]:
        """The request's step function over the slot's models with its processors, posting its
        steps on the board, and the recorder of its rows when it asks for logprobs
        (:mod:`.steps`)."""
        options, start = request.options, len(request.prompt)
        grammar = self.grammar_tokenizer if options.grammar is not None else None
        target = processed(slot.target, options, start, grammar)
        draft = None if slot.draft is None else processed(slot.draft, options, start, grammar)
        recorder = None if options.logprobs is None else RowRecorder(target, options.logprobs)
        # a seeded sample under the standard rule depends on its drafts: it plans alone
        alone = not choice.coupled and options.sampling.temperature > 0 and options.seed is not None

        def auto(model: ModelDrafter | None) -> AutoPlanner:
            if self.costs is None:
                raise ValueError("the auto policy needs the cost curve")
            history = self.history if self.config.shared_history and not alone else None
            suffix = slot.suffix_drafter(self.costs, self.k, history)
            share = None if alone else partial(self.board.share, slot.index)
            return auto_planner(
                self.costs, slot.target.vocab_size, model, self.k, suffix.history, suffix, share
            )

        step = request_step(self.config, options, recorder or target, draft, self.k, auto)
        return self.board.posting(slot.index, step), recorder
