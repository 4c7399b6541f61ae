"""One generation as the engine runs it: what :meth:`~spec_decode.serving.engine.Engine.prepare`
returns, what a worker :class:`~spec_decode.serving.worker.Job` carries and what
:meth:`~spec_decode.serving.engine.Engine.generate` takes.

Built only from checked parts: the checks that need no model live here (a token limit of at
least one, non-empty stop strings, sampling controls in range through
:class:`~spec_decode.core.sampling.SamplingParams`); those that need the model (ids inside its
vocabulary, a prompt that fits its context window) in
:meth:`~spec_decode.serving.engine.Engine.validate`. Each raises a
:class:`~spec_decode.core.errors.BadRequest` naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from spec_decode.constraints.grammar import Grammar
from spec_decode.core.checks import whole_number
from spec_decode.core.errors import BadPrompt, BadRequest
from spec_decode.core.processors import LogitBias, Penalties
from spec_decode.core.sampling import SamplingParams
from spec_decode.serving.logprobs import MAX_TOP_LOGPROBS


@dataclass(frozen=True)
class RequestOptions:
    """How a request is decoded, everything it asks besides its prompt and its length: built
    once from a request body or a command line and carried whole to the step.

    ``seed`` None draws a fresh one; generation ends early once a ``stop`` string appears in the
    text (cut before it); ``rule`` None is the engine's configured rule; ``target_only`` decodes
    without drafting; ``logprobs`` None reports none, n >= 0 each token's log-probability with
    the n most likely alternatives (:mod:`~spec_decode.serving.logprobs`). ``penalties``,
    ``logit_bias`` and ``grammar`` reweight or mask every row the target gives, along the
    drafted path too (:mod:`spec_decode.core.processors`). ``ignore_eos`` decodes on past
    end-of-generation tokens, to the token limit or a stop string (llama-server's and vLLM's
    field: every engine then writes the same number of tokens, which throughput comparisons
    need); it cannot go with a grammar, whose end is the answer's.
    """

    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None
    stop: tuple[str, ...] = ()
    rule: str | None = None
    target_only: bool = False
    logprobs: int | None = None
    penalties: Penalties = field(default_factory=Penalties)
    logit_bias: LogitBias | None = None
    grammar: Grammar | None = None
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        if any(not isinstance(s, str) or not s for s in stop):
            raise BadRequest("stop strings must be non-empty strings", "stop")
        object.__setattr__(self, "stop", stop)
        if self.ignore_eos and self.grammar is not None:
            raise BadRequest(
                "ignore_eos cannot go with a response format or required tool calls: their "
                "grammar ends the answer",
                "ignore_eos",
            )
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_TOP_LOGPROBS:
            raise BadRequest(
                f"top log-probabilities must lie in [0, {MAX_TOP_LOGPROBS}], got {self.logprobs}",
                "top_logprobs",
            )


@dataclass(frozen=True)
class GenerationRequest:
    """``max_tokens`` tokens at most after the token ids ``prompt``, decoded as ``options``
    say."""

    prompt: tuple[int, ...]
    max_tokens: int
    options: RequestOptions = field(default_factory=RequestOptions)

    def __post_init__(self) -> None:
        try:
            prompt = tuple(whole_number(t, "token ids") for t in self.prompt)
        except ValueError as error:
            raise BadPrompt(str(error)) from error
        object.__setattr__(self, "prompt", prompt)
        try:
            limit = whole_number(self.max_tokens, "max_tokens")
        except ValueError as error:
            raise BadRequest(str(error), "max_tokens") from error
        if limit < 1:
            raise BadRequest(f"max_tokens must be >= 1, got {limit}", "max_tokens")
        object.__setattr__(self, "max_tokens", limit)

    def target_only(self) -> GenerationRequest:
        """The same request decoded without drafting (what ``--compare`` sets beside it)."""
        return replace(self, options=replace(self.options, target_only=True))
