"""Broken coupled rules and position counters: each must FAIL the identity certificate
(:mod:`spec_decode.certify.identity`), and the exhaustive one where it changes the distribution.

Seed identity rests on position bookkeeping: the token at absolute output position t is decided
with position t's noise, by the draft and the target, in every step. Each entry gets one piece of
it wrong, as an engine keeping its own counter can (the third, noise keyed by the offset within
the step, is :class:`~spec_decode.certify.zoo.positional.StepRelativeNoise`).
"""

from __future__ import annotations

from spec_decode.core.coupled import CoupledRule
from spec_decode.core.noise import require_positional
from spec_decode.core.randomness import RandomSource
from spec_decode.core.steps import StepFunction
from spec_decode.core.trace import Step, Trace


class BonusFromLastDraftedNoise(CoupledRule):
    """BROKEN: the coupled rule, but after a full acceptance the bonus token is drawn with the
    noise of the last drafted position instead of the next one. The bonus then shares its noise
    with the token before it, so the pair is coupled, and target-only decoding (which draws the
    bonus position with its own noise) emits something else."""

    def bonus_offset(self, drafted: int) -> int:
        return max(drafted - 1, 0)


bonus_from_last_drafted_noise = BonusFromLastDraftedNoise()


def reusing_rejected_position(step: StepFunction) -> StepFunction:
    """BROKEN: ``step`` run with an engine's position counter that advances by the accepted
    drafts only after a rejection (the correction token's position is not counted), so the next
    step starts on the rejected position's noise and reuses it. A chain step's rejection is a
    step that kept fewer drafts than it verified."""

    def broken(context: list[int], remaining: int, trace: Trace, source: RandomSource) -> Step:
        rejections = sum(
            a < d for a, d in zip(trace.accepted_lengths, trace.drafted_lengths, strict=True)
        )
        start = len(trace.tokens) - rejections
        return step(context, remaining, trace, require_positional(source).at(start))

    return broken
