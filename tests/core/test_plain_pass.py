"""k = 0 from a policy: a plain target pass that samples the target's warped row directly.

A step that drafts nothing must be target-only sampling itself (the same draw from the same
random source, so the same seed gives the same tokens), must not call the rule, and must keep the
exhaustive certificate exact when a policy mixes plain passes with drafting.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from spec_decode import (
    SamplingParams,
    Trace,
    draft_from_target,
    generate_autoregressive,
    generate_speculative,
    random_markov,
)
from spec_decode.certify.exhaustive import exact_output_distribution
from spec_decode.core.generate import generate
from spec_decode.core.protocols import Plan
from spec_decode.core.rules import exact_rule
from spec_decode.core.steps import planned_step
from spec_decode.drafting.drafters import ModelDrafter


@dataclass(frozen=True)
class ConstantK:
    """Always k, even 0 or a bad negative value (FixedK refuses both)."""

    k: int

    def next_k(self, trace: Trace) -> int:
        return self.k


@dataclass(frozen=True)
class AlternatingK:
    """k = 0 after a step that drafted, ``k`` after a plain pass: mixes both kinds of step."""

    k: int

    def next_k(self, trace: Trace) -> int:
        return 0 if trace.drafted_lengths and trace.drafted_lengths[-1] else self.k


def refusing_rule(p, q, drafts, rng):
    raise AssertionError("the rule was called on a step with no drafts")


@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=0.7, top_k=3)])
def test_k_zero_is_target_only_sampling_draw_for_draw(pair32, sampling):
    target, draft = pair32
    plain = generate_speculative(
        target,
        draft,
        [0],
        200,
        ConstantK(0),
        np.random.default_rng(4),
        sampling=sampling,
        rule=refusing_rule,
    )
    reference = generate_autoregressive(
        target, [0], 200, np.random.default_rng(4), sampling=sampling
    )
    assert plain.tokens == reference.tokens
    assert plain.proposed == 0 and plain.target_passes == 200
    assert set(plain.drafter_names) == {""}


def test_a_negative_k_is_refused(pair32):
    target, draft = pair32
    with pytest.raises(ValueError, match="must be >= 0"):
        generate_speculative(target, draft, [0], 5, ConstantK(-1), np.random.default_rng(0))


def test_an_unknown_drafter_name_is_refused(pair32):
    target, draft = pair32

    class Planner:
        def plan(self, context, trace, k_max):
            return Plan("nobody", 1)

    step = planned_step(
        target, {"model": ModelDrafter(draft)}, Planner(), exact_rule, SamplingParams()
    )
    with pytest.raises(ValueError, match="unknown drafter 'nobody'"):
        generate(target, step, [0], 5, np.random.default_rng(0))


def test_steps_record_their_drafter(pair32):
    target, draft = pair32
    trace = generate_speculative(target, draft, [0], 50, AlternatingK(2), np.random.default_rng(1))
    names = set(zip(trace.drafter_names, trace.drafted_lengths, strict=True))
    assert names == {("", 0), ("drafter", 2)} or names == {("", 0), ("drafter", 2), ("drafter", 1)}


@pytest.mark.slow
@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=0)])
def test_mixing_plain_passes_and_drafts_is_exact(sampling):
    target = random_markov(3, seed=5)
    draft = draft_from_target(target, 0.5, seed=6)
    result = exact_output_distribution(target, draft, [0], 5, AlternatingK(2), sampling=sampling)
    assert abs(result.total_probability - 1) < 1e-12
    assert result.tv < 1e-12
