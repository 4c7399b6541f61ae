"""Speculative and target-only generation, with exact accounting of target passes.

One speculative step: the drafter proposes up to k tokens, the target scores the committed prefix
plus all of them in ONE pass (:func:`spec_decode.models.score`), and the rule decides what to emit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar

import numpy as np

from spec_decode.distributions import check_distributions
from spec_decode.drafters import Drafter, ModelDrafter
from spec_decode.models import Model, score
from spec_decode.policies import FixedK, KPolicy
from spec_decode.randomness import RandomSource, as_source
from spec_decode.rules import Rule, exact_rule
from spec_decode.sampling import SamplingParams


class HasVocabulary(Protocol):
    """Anything with a ``vocab_size``: a chain or a tree drafter."""

    vocab_size: int


#: A step result with an ``emitted`` field (chain or tree).
AnyStep = TypeVar("AnyStep")

#: Called with each step's emitted tokens as soon as they are decided (for streaming text).
TokenCallback = Callable[[list[int]], None]


@dataclass
class Trace:
    """What a generation run emitted and what it cost.

    Each step makes one target pass; ``drafted_lengths`` and ``accepted_lengths`` hold, per step,
    how many tokens were drafted and how many of those were kept (bonus and residual tokens are
    not counted). ``draft_seconds`` and ``target_seconds`` are measured wall-clock time spent in
    the drafter and in target scoring.
    """

    tokens: list[int] = field(default_factory=list)
    drafted_lengths: list[int] = field(default_factory=list)
    accepted_lengths: list[int] = field(default_factory=list)
    draft_seconds: float = 0.0
    target_seconds: float = 0.0

    @property
    def target_passes(self) -> int:
        """Target forward passes: one per step."""
        return len(self.drafted_lengths)

    @property
    def proposed(self) -> int:
        """Drafted tokens, over all steps."""
        return sum(self.drafted_lengths)

    @property
    def accepted(self) -> int:
        """Drafted tokens that were kept, over all steps."""
        return sum(self.accepted_lengths)

    @property
    def draft_calls(self) -> int:
        """Draft forward calls: one per drafted token."""
        return self.proposed

    @property
    def acceptance_rate(self) -> float:
        """accepted / proposed drafted tokens; NaN when nothing was drafted."""
        return self.accepted / self.proposed if self.proposed else float("nan")

    @property
    def tokens_per_pass(self) -> float:
        """Emitted tokens per target forward pass (1.0 for target-only decoding)."""
        return len(self.tokens) / self.target_passes if self.target_passes else float("nan")

    #: Each step makes exactly one target pass, so tokens per step and per pass coincide.
    tokens_per_step = tokens_per_pass

    @property
    def acceptance_histogram(self) -> np.ndarray:
        """``histogram[j]`` = number of steps that accepted exactly j drafted tokens."""
        return np.bincount(np.asarray(self.accepted_lengths, dtype=int))

    def record(self, step: StepResult) -> None:
        """Add one step's outcome."""
        self.drafted_lengths.append(len(step.drafted))
        self.accepted_lengths.append(_leading_matches(step.drafted, step.emitted))
        self.tokens.extend(step.emitted)
        self.draft_seconds += step.draft_seconds
        self.target_seconds += step.target_seconds

    def speedup(self, draft_cost: float) -> float:
        """Speedup over target-only decoding when a draft call costs ``draft_cost`` target passes.

        Cost model: tokens / (target_passes + draft_cost * draft_calls); target-only decoding
        pays one pass per token.
        """
        return len(self.tokens) / (self.target_passes + draft_cost * self.draft_calls)


def start_generation(
    target: Model,
    drafter: HasVocabulary | None,
    prefix: Sequence[int],
    n_tokens: int,
    rng: np.random.Generator | RandomSource,
) -> tuple[list[int], RandomSource]:
    """Check what every generator is given; return the working context and the random source."""
    if n_tokens < 0:
        raise ValueError(f"n_tokens must be >= 0, got {n_tokens}")
    if drafter is not None and drafter.vocab_size != target.vocab_size:
        raise ValueError(
            f"draft vocabulary ({drafter.vocab_size}) differs from the target's "
            f"({target.vocab_size})"
        )
    return _check_prefix(prefix, target.vocab_size), as_source(rng)


def _check_prefix(prefix: Sequence[int], vocab_size: int) -> list[int]:
    tokens = [int(t) for t in prefix]
    if not tokens:
        raise ValueError("the prefix (prompt) is empty: give at least one token")
    if min(tokens) < 0 or max(tokens) >= vocab_size:
        raise ValueError(f"prefix tokens must lie in [0, {vocab_size}), got {tokens}")
    return tokens


def _check_proposal(
    tokens: Sequence[int], q: np.ndarray, k: int, vocab_size: int
) -> tuple[list[int], np.ndarray]:
    tokens = [int(t) for t in tokens]
    if len(tokens) > k:
        raise ValueError(f"drafter proposed {len(tokens)} tokens, more than k = {k}")
    if any(not 0 <= t < vocab_size for t in tokens):
        raise ValueError(f"drafter proposed tokens outside the vocabulary: {tokens}")
    q = check_distributions(np.reshape(q, (len(tokens), vocab_size)), vocab_size, "draft q")
    claimed = q[np.arange(len(tokens)), tokens]
    if np.any(claimed <= 0):
        raise ValueError("drafter proposed a token its own q gives probability 0")
    return tokens, q


def _check_emitted(emitted: object, n_drafted: int, vocab_size: int) -> list[int]:
    if not isinstance(emitted, Sequence) or isinstance(emitted, str):
        raise ValueError(f"rule must return a list of token ids, got {type(emitted).__name__}")
    if not 1 <= len(emitted) <= n_drafted + 1:
        raise ValueError(
            f"rule emitted {len(emitted)} tokens; a step must emit between 1 and "
            f"k + 1 = {n_drafted + 1}"
        )
    if any(not isinstance(t, int | np.integer) or not 0 <= t < vocab_size for t in emitted):
        raise ValueError(f"rule emitted tokens outside the vocabulary [0, {vocab_size}): {emitted}")
    return [int(t) for t in emitted]


def stop_early(step: AnyStep, stop_tokens: Collection[int]) -> AnyStep:
    """The step (chain or tree) with everything after its first stop token removed."""
    cut = next((i for i, t in enumerate(step.emitted) if t in stop_tokens), None)
    if cut is None:
        return step
    return replace(step, emitted=step.emitted[: cut + 1])


def _leading_matches(drafted: list[int], emitted: list[int]) -> int:
    """How many drafted tokens the step kept: the length of the common prefix."""
    for i, (d, e) in enumerate(zip(drafted, emitted, strict=False)):
        if d != e:
            return i
    return min(len(drafted), len(emitted))


@dataclass(frozen=True)
class StepResult:
    """One draft-verify step: what was drafted, what was emitted, and the time each part took."""

    drafted: list[int]
    emitted: list[int]
    draft_seconds: float = 0.0
    target_seconds: float = 0.0


def speculative_step(
    target: Model,
    drafter: Drafter,
    prefix: list[int],
    k: int,
    rule: Rule,
    source: RandomSource,
    sampling: SamplingParams,
) -> StepResult:
    """One draft-verify step after ``prefix``."""
    vocab_size = target.vocab_size
    start = time.perf_counter()
    drafted, q = _check_proposal(*drafter.propose(prefix, k, source), k, vocab_size)
    drafted_at = time.perf_counter()
    raw_p = check_distributions(score(target, prefix, drafted), vocab_size, "target distribution")
    scored_at = time.perf_counter()
    if raw_p.shape != (len(drafted) + 1, vocab_size):
        raise ValueError(
            f"target score has shape {raw_p.shape}, expected {(len(drafted) + 1, vocab_size)}"
        )
    emitted = _check_emitted(
        rule(sampling.warp(raw_p), q, drafted, source), len(drafted), vocab_size
    )
    return StepResult(drafted, emitted, drafted_at - start, scored_at - drafted_at)


def generate_speculative(
    target: Model,
    draft: Model | None,
    prefix: Sequence[int],
    n_tokens: int,
    k: int | KPolicy,
    rng: np.random.Generator | RandomSource,
    *,
    sampling: SamplingParams | None = None,
    rule: Rule = exact_rule,
    drafter: Drafter | None = None,
    on_tokens: TokenCallback | None = None,
    stop_tokens: Collection[int] = (),
) -> Trace:
    """Emit ``n_tokens`` tokens after ``prefix`` by speculative decoding.

    Parameters
    ----------
    target, draft
        The target model and the draft model; ``draft`` may be ``None`` when ``drafter`` is given.
    prefix
        The prompt: at least one token id.
    n_tokens
        How many tokens to emit; the last step drafts at most what is still needed.
    k
        The most tokens drafted per step (k >= 1), or a :class:`~spec_decode.policies.KPolicy`
        that chooses it before each step from the trace so far.
    rng
        A numpy ``Generator`` or a :class:`~spec_decode.randomness.RandomSource`.
    sampling
        Controls applied to both models' distributions; the output is distributed as sampling from
        the target under these controls (token-identical to greedy decoding at temperature 0).
    rule
        The verification rule; :func:`~spec_decode.rules.exact_rule` by default.
    drafter
        Proposes the drafts; by default a :class:`~spec_decode.drafters.ModelDrafter` on ``draft``.
    on_tokens
        Called with each step's emitted tokens, in order.
    stop_tokens
        End early, right after emitting any of these (such as end-of-sequence); the stop token is
        the last one returned and nothing after it is emitted.
    """
    sampling = sampling or SamplingParams()
    policy = FixedK(k) if isinstance(k, int | np.integer) else k
    if drafter is None:
        if draft is None:
            raise ValueError("give a draft model or a drafter")
        drafter = ModelDrafter(draft, sampling)
    context, source = start_generation(target, drafter, prefix, n_tokens, rng)
    trace = Trace()
    while len(trace.tokens) < n_tokens:
        k_now = policy.next_k(trace)
        if k_now < 1:
            raise ValueError(f"the k policy chose k = {k_now}; it must be >= 1")
        remaining = n_tokens - len(trace.tokens)
        step_k = min(k_now, remaining - 1)  # a step emits at most step_k + 1 tokens: no overshoot
        step = stop_early(
            speculative_step(target, drafter, context, step_k, rule, source, sampling), stop_tokens
        )
        trace.record(step)
        context.extend(step.emitted)
        if on_tokens is not None:
            on_tokens(step.emitted)
        if step.emitted[-1] in stop_tokens:
            break
    return trace


def generate_autoregressive(
    target: Model,
    prefix: Sequence[int],
    n_tokens: int,
    rng: np.random.Generator | RandomSource,
    *,
    sampling: SamplingParams | None = None,
    on_tokens: TokenCallback | None = None,
    stop_tokens: Collection[int] = (),
) -> Trace:
    """Target-only decoding: one target pass per emitted token (the reference distribution).

    Takes ``sampling``, ``on_tokens`` and ``stop_tokens`` as :func:`generate_speculative` does.
    """
    sampling = sampling or SamplingParams()
    context, source = start_generation(target, None, prefix, n_tokens, rng)
    trace = Trace()
    for _ in range(n_tokens):
        start = time.perf_counter()
        raw_p = check_distributions(
            target.next_dist(context), target.vocab_size, "target distribution"
        )
        scored_at = time.perf_counter()
        token = source.categorical(sampling.warp(raw_p))
        trace.record(StepResult([], [token], target_seconds=scored_at - start))
        context.append(token)
        if on_tokens is not None:
            on_tokens([token])
        if token in stop_tokens:
            break
    return trace
