"""Generation: ONE loop, with a step function for each way of proposing tokens.

:func:`generate` checks its inputs, then repeats: call the step function
(:mod:`spec_decode.core.steps`: chain, planned, greedy, tree or target-only; one target pass
each) on the context so far, cut the step at a stop token, record it in the
:class:`~spec_decode.core.trace.Trace`, extend the context.

:func:`generate_autoregressive` is the thin wrapper for target-only decoding; the wrappers that
also build a default drafter (``generate_speculative``, ``generate_tree``) live one layer up, in
:mod:`spec_decode.drafting.speculative`, since core knows drafters only by their interface
(:mod:`spec_decode.core.protocols`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import numpy as np

from spec_decode.core.checks import check_n_tokens, check_prefix
from spec_decode.core.models import Model
from spec_decode.core.noise import positioned
from spec_decode.core.randomness import RandomSource, as_source
from spec_decode.core.sampling import SamplingParams
from spec_decode.core.steps import StepFunction, target_step
from spec_decode.core.trace import Trace

#: Called with each step's emitted tokens as soon as they are decided (for streaming text).
TokenCallback = Callable[[list[int]], None]


def generate(
    target: Model,
    step: StepFunction,
    prefix: Sequence[int],
    n_tokens: int,
    rng: np.random.Generator | RandomSource,
    *,
    on_tokens: TokenCallback | None = None,
    stop_tokens: Collection[int] = (),
) -> Trace:
    """Emit ``n_tokens`` tokens after ``prefix``, one ``step`` (one target pass) at a time.

    A step is told how many tokens are still wanted and must not emit more. Generation ends early
    right after any token in ``stop_tokens`` (which is kept). A positional source
    (:mod:`spec_decode.core.noise`) is re-based at each step on the absolute output position the
    step starts at, so position t's noise never depends on how steps were cut.
    """
    n_tokens = check_n_tokens(n_tokens)
    context, source = check_prefix(prefix, target.vocab_size), as_source(rng)
    trace = Trace()
    while len(trace.tokens) < n_tokens:
        at_step = positioned(source, len(trace.tokens))
        outcome = step(context, n_tokens - len(trace.tokens), trace, at_step)
        outcome = outcome.cut_at_stop(stop_tokens)
        trace.record(outcome)
        context.extend(outcome.emitted)
        if on_tokens is not None:
            on_tokens(outcome.emitted)
        if outcome.emitted[-1] in stop_tokens:
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
    step = target_step(target, sampling or SamplingParams())
    return generate(
        target, step, prefix, n_tokens, rng, on_tokens=on_tokens, stop_tokens=stop_tokens
    )
