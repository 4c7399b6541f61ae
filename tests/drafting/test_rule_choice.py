"""A rule chosen by name comes with the drafters and the random source that agree with it: under
"coupled" a run and its target-only comparison emit the same tokens for a seed."""

from __future__ import annotations

import numpy as np
import pytest

from spec_decode import SamplingParams, draft_from_target, random_markov
from spec_decode.core.coupled import is_coupled
from spec_decode.core.generate import generate
from spec_decode.core.noise import PositionalSource
from spec_decode.core.tree import TreeShape
from spec_decode.drafting.auto import auto_planner
from spec_decode.drafting.costs import CostCurve
from spec_decode.drafting.rule_choice import RULE_NAMES, rule_by_name


def test_each_name_gives_matching_parts():
    for name in RULE_NAMES:
        choice = rule_by_name(name)
        model = random_markov(4, seed=0)
        parts = (choice.chain, choice.tree, choice.model_drafter(model, SamplingParams()))
        assert {is_coupled(parts[0]), is_coupled(parts[1]), parts[2].coupled} == {choice.coupled}
        assert choice.tree_drafter(model, SamplingParams()).coupled == choice.coupled
        assert isinstance(choice.source(3), PositionalSource) == choice.coupled
    with pytest.raises(ValueError, match="coupled, standard"):
        rule_by_name("typical")


def test_a_coupled_comparison_prints_identical_tokens():
    """What ``generate --compare --rule coupled`` does: every run gets ``choice.source(seed)``."""
    target = random_markov(16, seed=1)
    draft = draft_from_target(target, 0.6, seed=2)
    sampling = SamplingParams(0.7)
    choice = rule_by_name("coupled")
    costs = CostCurve((1, 17), (0.010, 0.010), 0.001)  # a curve on which auto drafts
    steps = [
        choice.step(target, None, 3, sampling),
        choice.step(target, choice.model_drafter(draft, sampling), 3, sampling),
        choice.step(target, choice.tree_drafter(draft, sampling), 3, sampling, TreeShape((2, 2))),
        choice.step(
            target, auto_planner(costs, 16, choice.model_drafter(draft, sampling), 4), 3, sampling
        ),
    ]
    for seed in range(5):
        runs = [generate(target, step, [0], 30, choice.source(seed)) for step in steps]
        assert all(run.tokens == runs[0].tokens for run in runs)
        assert all(run.accepted > 0 for run in runs[1:])
    standard = rule_by_name("standard")
    assert isinstance(standard.source(3), np.random.Generator)
    assert isinstance(choice.source(None), PositionalSource)  # no seed: a fresh one
