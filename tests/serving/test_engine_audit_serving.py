"""The serving engine, audited end to end as a black box (the auto policy and the coupled rule
on the tiny GGUF pair, sampled at T = 0.8): its joint distribution of the first two tokens is
its own target-only decoding's."""

from __future__ import annotations

import numpy as np
import pytest

from spec_decode.certify.engine_audit import audit_engine
from spec_decode.core.sampling import SamplingParams
from spec_decode.serving.request import RequestOptions


class ServingEngine:
    """The serving engine (auto policy, coupled rule) on the tiny GGUF pair as an adapter."""

    def __init__(self, pair) -> None:
        from spec_decode.serving.config import EngineConfig
        from spec_decode.serving.engine import Engine

        target, draft = pair
        self.engine = Engine.load(EngineConfig(target=str(target), draft=str(draft), threads=1))
        self.vocab_size = self.engine.target.model.vocab_size

    def target_probs(self, prefix, sampling):
        return sampling.warp(self.engine.target.model.next_dist(list(prefix)))

    def generate(self, prefix, n_tokens, sampling, seed):
        request = self.engine.prepare(
            list(prefix), RequestOptions(sampling=sampling, seed=seed), max_tokens=n_tokens
        )
        return self.engine.generate(request).tokens


@pytest.mark.slow
def test_the_serving_engine_passes(tiny_pair):
    pytest.importorskip("llama_cpp")
    engine = ServingEngine(tiny_pair)
    prefix = [4, 5, 6, 4, 5, 6, 4, 5]  # letters that repeat: lookup and suffix drafts fire
    report = audit_engine(
        engine, prefix=prefix, tokens=2, samples=3_000, sampling=SamplingParams(0.8)
    )
    assert report.verdict == "PASS", report
    assert np.isfinite(report.p_value) and report.problem is None
