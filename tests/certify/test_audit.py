"""The auditor: zoo bugs FAIL, exact controls PASS, malformed code is refused clearly."""

from __future__ import annotations

import numpy as np
import pytest

from spec_decode import zoo
from spec_decode.certify.audit import EXACT_TV_TOLERANCE, audit
from spec_decode.certify.grid import audit_cases
from spec_decode.core.rules import exact_rule


@pytest.mark.parametrize("name", zoo.BROKEN_RULES)
def test_every_broken_rule_fails(name):
    report = audit(rule=zoo.BROKEN_RULES[name])
    assert report.verdict == "FAIL", report
    assert report.problem is None
    if report.method == "exhaustive":
        assert report.exhaustive_tv > 0.01
    else:  # drew uniform(): judged statistically
        assert name == "unnormalised_residual"
        assert report.false_alarm_rate == 1e-3
        assert report.detectable_tv == pytest.approx(0.05, abs=1e-6)


@pytest.mark.parametrize("name", zoo.BROKEN_DRAFTERS)
def test_every_broken_drafter_fails(name):
    report = audit(drafter=zoo.BROKEN_DRAFTERS[name])
    assert report.verdict == "FAIL", report


@pytest.mark.parametrize(
    ("rule", "drafter"),
    [(exact_rule, None), (zoo.sample_match, None), (None, zoo.one_hot_drafter)],
    ids=["exact rule", "sample-match", "one-hot deterministic drafter"],
)
def test_exact_controls_pass_exhaustively(rule, drafter):
    report = audit(rule=rule, drafter=drafter)
    assert report.verdict == "PASS", report
    assert report.method == "exhaustive"
    assert report.exhaustive_tv < EXACT_TV_TOLERANCE
    assert report.paths > 100


def test_exact_rule_passes_statistically():
    report = audit(statistical=True, seed=3, cases=audit_cases(seed=3)[::3])
    assert report.verdict == "PASS", [c.statistical.tests for c in report.cases]
    assert report.method == "statistical"
    assert report.false_alarm_rate == 1e-3
    assert report.detectable_tv <= 0.05 + 1e-6


def test_statistical_audit_also_catches_an_enumerable_bug():
    report = audit(rule=zoo.resample_from_target, statistical=True, cases=audit_cases()[:4])
    assert report.verdict == "FAIL"


def test_search_grid_covers_the_exposing_inputs():
    cases = audit_cases()
    assert {c.vocab for c in cases} == {2, 3, 4}
    assert {c.k for c in cases} == {1, 2, 3}
    assert {"disjoint supports", "near ties", "sparse", "peaked", "flat"} <= {c.kind for c in cases}
    assert any(c.sampling.greedy for c in cases)
    assert any(c.sampling.top_k for c in cases) and any(c.sampling.top_p < 1 for c in cases)


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (lambda p, q, d, rng: "not a list", "list of token ids"),
        (lambda p, q, d, rng: [p.shape[1] + 3], "outside the vocabulary"),
        (lambda p, q, d, rng: [], "emitted 0 tokens"),
        (lambda p, q, d, rng: [np.float64(0.5)], "outside the vocabulary"),
        (lambda p, q, d, rng: 1 / 0, "ZeroDivisionError"),
    ],
    ids=["wrong type", "outside vocabulary", "empty", "non-integer", "crash"],
)
def test_malformed_rules_fail_with_a_clear_message(rule, message):
    report = audit(rule=rule)
    assert report.verdict == "FAIL"
    assert message in report.problem


def test_drafter_object_bound_to_its_vocabulary():
    class Uniform:
        """Proposes uniformly over 3 tokens, honestly."""

        vocab_size = 3

        def propose(self, prefix, k, rng):
            q = np.full((k, 3), 1 / 3)
            return [rng.categorical(row) for row in q], q

    report = audit(drafter=Uniform())
    assert report.verdict == "PASS"
    assert all(", V=3," in c.case for c in report.cases)
