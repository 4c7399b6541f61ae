"""A rule chosen by name comes with the drafters and the random source that agree with it (the
steps each case runs: tests/serving/test_request_step.py)."""

from __future__ import annotations

import numpy as np
import pytest

from spec_decode import SamplingParams, random_markov
from spec_decode.core.coupled import is_coupled
from spec_decode.core.noise import PositionalSource
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


def test_a_fresh_coupled_source_without_a_seed():
    assert isinstance(rule_by_name("coupled").source(None), PositionalSource)
    assert isinstance(rule_by_name("standard").source(3), np.random.Generator)
