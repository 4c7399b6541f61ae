"""Hugging Face transformers' shipped `_speculative_sampling`, audited through our interface."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from spec_decode.certify.audit import EXACT_TV_TOLERANCE, audit
from spec_decode.certify.grid import audit_cases
from spec_decode.certify.third_party.transformers_rule import (
    hf_ensemble_verification,
    hf_speculative_sampling,
)

#: Slow: transformers' sampler audited over the grid, in torch.
pytestmark = pytest.mark.slow

#: Plain, warped and greedy cases with small path counts: the wrapper costs ~1 ms per call.
CASES = [c for c in audit_cases() if c.vocab <= 3 and c.k <= 2]


def test_hf_speculative_sampling_is_exact_by_enumeration():
    report = audit(rule=hf_speculative_sampling, cases=CASES)
    assert report.verdict == "PASS", report
    assert report.exhaustive_tv < EXACT_TV_TOLERANCE


def test_hf_speculative_sampling_passes_statistically():
    """30,000 runs (the rule costs a torch call each): the test still detects a TV of 0.05
    with probability 0.99 at false-alarm rate 1e-3."""
    report = audit(
        rule=hf_speculative_sampling, statistical=True, cases=CASES[:1], statistical_runs=30_000
    )
    assert report.verdict == "PASS"
    assert report.detectable_tv <= 0.05


def test_hf_ensemble_verification_is_refuted():
    report = audit(rule=hf_ensemble_verification, cases=CASES)
    assert report.verdict == "FAIL"
    assert report.exhaustive_tv > 0.01
