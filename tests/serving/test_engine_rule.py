"""The engine's rule: under "coupled" (the default) a request's speculative output is its
target-only output for the seed at any temperature; an unknown rule is refused up front."""

from __future__ import annotations

import pytest

from spec_decode.core.sampling import SamplingParams
from spec_decode.serving.engine import Engine, EngineConfig


@pytest.fixture(scope="module")
def fixed(tiny_pair):
    target, draft = tiny_pair
    config = EngineConfig(target=str(target), draft=str(draft), threads=1, policy="fixed", k=3)
    return Engine.load(config)


def test_coupled_requests_equal_target_only_for_each_seed(fixed):
    prompt = fixed.encode("abcab", raw=True)
    sampling = SamplingParams(0.7)
    for seed in range(4):
        fixed.forget()
        spec = fixed.generate(prompt, 16, sampling=sampling, seed=seed)
        fixed.forget()
        plain = fixed.generate(prompt, 16, sampling=sampling, seed=seed, target_only=True)
        assert spec.tokens == plain.tokens
        assert spec.trace.accepted > 0


def test_an_unknown_rule_is_refused_before_loading():
    with pytest.raises(ValueError, match="coupled, standard"):
        EngineConfig(rule="typical")
