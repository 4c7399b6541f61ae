"""The auditor: zoo bugs FAIL, exact controls PASS, malformed code is refused clearly."""

from __future__ import annotations

import numpy as np
import pytest

from spec_decode.certify import in_process, zoo
from spec_decode.certify.audit import EXACT_TV_TOLERANCE, audit
from spec_decode.certify.goodness_of_fit import detectable_tv
from spec_decode.certify.grid import audit_cases
from spec_decode.certify.statistical import POWER
from spec_decode.core.rules import exact_rule
from spec_decode.core.tree_rules import verify_tree


@pytest.mark.slow
@pytest.mark.parametrize("name", zoo.BROKEN_RULES)
def test_every_broken_rule_fails(name):
    report = audit(rule=zoo.BROKEN_RULES[name])
    assert report.verdict == "FAIL", report
    assert report.problem is None
    if report.method == "exhaustive":
        assert report.exhaustive_tv > 0.01
    else:  # turned a uniform() into a numpy array: judged statistically, and said why
        assert name == "unnormalised_residual"
        assert "numpy conversion" in report.fallback
        assert report.false_alarm_rate == 1e-3
        assert report.min_p_value < 1e-3 / len(audit_cases())


@pytest.mark.slow
@pytest.mark.parametrize("name", zoo.BROKEN_DRAFTERS)
def test_every_broken_drafter_fails(name):
    report = audit(drafter=zoo.BROKEN_DRAFTERS[name])
    assert report.verdict == "FAIL", report


@pytest.mark.slow
@pytest.mark.parametrize(
    ("rule", "drafter"),
    [
        (exact_rule, None),
        (zoo.sample_match, None),
        (zoo.uniform_rule, None),
        (None, zoo.one_hot_drafter),
    ],
    ids=[
        "exact rule",
        "sample-match",
        "uniform compared with p/q",
        "one-hot deterministic drafter",
    ],
)
def test_exact_controls_pass_exhaustively(rule, drafter):
    report = audit(rule=rule, drafter=drafter)
    assert report.verdict == "PASS", report
    assert report.method == "exhaustive"
    assert report.exhaustive_tv < EXACT_TV_TOLERANCE
    assert report.paths > 100


@pytest.mark.slow
def test_exact_rule_passes_statistically_with_stated_power():
    cases = audit_cases(seed=3)[:2]
    report = audit(statistical=True, seed=3, cases=cases, statistical_runs=8_000)
    assert report.verdict == "PASS", [c.statistical.tests for c in report.cases]
    assert report.method == "statistical" and report.fallback == "requested"
    assert report.false_alarm_rate == 1e-3
    expected = max(
        detectable_tv(4_000, c.vocab ** (c.k + 3), 1e-3 / len(cases), POWER) for c in cases
    )
    assert report.detectable_tv == pytest.approx(expected)
    assert 0 < report.min_p_value <= 1


@pytest.mark.slow
def test_statistical_audit_tests_the_joint_and_catches_a_correlated_uniform():
    deep = [c for c in audit_cases() if c.kind == "deterministic draft" and c.k == 6]
    report = audit(rule=zoo.shared_uniform, statistical=True, cases=deep, statistical_runs=4_000)
    assert report.verdict == "FAIL"
    assert "jointly" in next(iter(report.cases[0].statistical.tests))


@pytest.mark.slow
def test_a_rule_wrong_only_from_four_drafts_fails_and_the_old_grid_was_blind():
    deep = [c for c in audit_cases() if c.k >= 4]
    shallow = [c for c in audit_cases() if c.k <= 3]
    assert audit(rule=zoo.exact_up_to_three, cases=shallow).verdict == "PASS"
    report = audit(rule=zoo.exact_up_to_three, cases=deep)
    assert report.verdict == "FAIL" and report.exhaustive_tv > 0.01
    assert ", k=4," in report.worst_case or ", k=8," in report.worst_case


@pytest.mark.slow
def test_correlated_uniforms_fail_exactly():
    report = audit(rule=zoo.shared_uniform, cases=[c for c in audit_cases() if c.k >= 2][:6])
    assert report.method == "exhaustive" and report.fallback is None
    assert report.verdict == "FAIL" and report.exhaustive_tv > 0.01


@pytest.mark.slow
def test_float32_rounding_passes_only_within_a_stated_tolerance():
    cases = [c for c in audit_cases() if c.k >= 4]
    strict = audit(rule=zoo.float32_rule, cases=cases)
    assert strict.verdict == "FAIL" and 1e-9 < strict.exhaustive_tv < 1e-6
    assert strict.rounding_tv == pytest.approx(strict.exhaustive_tv, rel=1.0)
    assert audit(rule=zoo.float32_rule, cases=cases, tolerance=1e-6).verdict == "PASS"
    assert audit(rule=zoo.swapped_residual, cases=cases, tolerance=1e-6).verdict == "FAIL"


@pytest.mark.slow
def test_rules_see_the_sampling_settings_when_they_ask():
    greedy = [c for c in audit_cases() if c.sampling.greedy]
    sampled = [c for c in audit_cases() if not c.sampling.greedy]
    assert audit(rule=zoo.greedy_accepts_all, cases=greedy).verdict == "FAIL"
    assert audit(rule=zoo.greedy_accepts_all, cases=sampled[:4]).verdict == "PASS"


@pytest.mark.slow
def test_arrays_and_tensors_are_accepted_as_rule_output():
    torch = pytest.importorskip("torch")
    cases = audit_cases()[:3]

    def as_array(p, q, d, rng):
        return np.array(exact_rule(p, q, d, rng).emitted)

    def as_tensor(p, q, d, rng):
        return torch.tensor(exact_rule(p, q, d, rng).emitted)

    assert audit(rule=as_array, cases=cases).verdict == "PASS"
    assert audit(rule=as_tensor, cases=cases).verdict == "PASS"

    def as_floats(p, q, d, rng):
        return np.array(exact_rule(p, q, d, rng).emitted, float)

    floats = audit(rule=as_floats, cases=cases)
    assert floats.verdict == "FAIL" and "dtype float64" in floats.problem


@pytest.mark.slow
def test_a_rule_that_cannot_take_zero_drafts_is_never_given_them():
    def needs_drafts(p, q, d, rng):
        assert len(d) > 0, "zero drafts"
        return exact_rule(p, q, d, rng)

    assert audit(rule=needs_drafts, cases=audit_cases()[:4]).verdict == "PASS"


def test_crash_reports_carry_the_case_the_inputs_and_the_frame():
    def crashes_on_rejection(p, q, d, rng):
        if not rng.bernoulli(0.5):
            raise RuntimeError("boom")
        return exact_rule(p, q, d, rng)

    problem = audit(rule=crashes_on_rejection).problem
    assert "RuntimeError: boom" in problem
    assert "case: peaked, V=2, k=1, plain" in problem
    assert "p=[[" in problem and "drafts=[" in problem
    assert "in crashes_on_rejection" in problem


@pytest.mark.slow
def test_an_enumeration_over_budget_turns_statistical_and_says_so(monkeypatch):
    monkeypatch.setattr(in_process, "CASE_PATHS", 10)  # the budget the run reads
    report = audit(cases=audit_cases()[2:3], statistical_runs=2_000)
    assert report.method == "statistical" and "more than 10" in report.fallback


@pytest.mark.slow
def test_tree_rules_are_audited():
    assert audit(tree_rule=verify_tree).verdict == "PASS"
    report = audit(tree_rule=zoo.tree_without_residual_update)
    assert report.verdict == "FAIL" and report.exhaustive_tv > 1e-3


def test_spec_decode_audit_is_the_auditor():
    import spec_decode

    assert spec_decode.audit is audit


def test_search_grid_covers_the_exposing_inputs():
    cases = audit_cases()
    assert {c.vocab for c in cases} == {2, 3, 4, 5, 6}
    assert {c.k for c in cases} == {1, 2, 3, 4, 6, 8}
    assert all(c.n_tokens > c.k for c in cases)  # the first step drafts all k
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


@pytest.mark.slow
def test_drafter_object_bound_to_its_vocabulary():
    class Uniform:
        """Proposes uniformly over 3 tokens, honestly."""

        vocab_size = 3

        def propose(self, prefix, k, rng):
            q = np.full((k, 3), 1 / 3)
            return [rng.categorical(row) for row in q], q

    bound = audit_cases(vocab=Uniform.vocab_size)  # what audit() runs for this drafter
    assert bound and all(c.vocab == 3 for c in bound)
    report = audit(drafter=Uniform(), cases=[c for c in bound if c.k <= 2])  # the deep ones: slow
    assert report.verdict == "PASS"
    assert all(", V=3," in c.case for c in report.cases)
