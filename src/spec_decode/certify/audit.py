"""Certify or refute any verification rule and/or drafter.

The auditor runs the real generator with the code under test plugged in, over a search grid of
model pairs chosen to expose bugs (peaked, flat and sparse rows, disjoint supports, a draft that is
zero where the target is not, near ties; vocabularies 2-4; k = 1-3; plain, warped and greedy
sampling). Where the code draws only through ``bernoulli``/``categorical`` it is enumerated
exhaustively and the verdict rests on the exact total-variation distance; code that draws
``uniform()`` is judged by seeded chi-square tests with a stated false-alarm rate and power.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from spec_decode.certify.enumeration import NotEnumerable
from spec_decode.certify.exhaustive import exact_output_distribution
from spec_decode.certify.generators import chain_generator
from spec_decode.certify.goodness_of_fit import samples_for_power
from spec_decode.certify.grid import AuditCase, audit_cases
from spec_decode.certify.statistical import POWER, StatisticalCertificate, statistical_certificate
from spec_decode.core.models import MarkovModel
from spec_decode.core.randomness import RandomSource
from spec_decode.core.rules import Rule, exact_rule
from spec_decode.core.sampling import SamplingParams
from spec_decode.drafting.drafters import Drafter, ModelDrafter

#: An exhaustive TV above this refutes exactness (our own code stays below 1e-15; the margin
#: absorbs rounding in third-party code that computes in other orders).
EXACT_TV_TOLERANCE = 1e-9
#: The TV the statistical audit is sized to detect with probability >= POWER in every case.
STATISTICAL_TV = 0.05

DrafterFunction = Callable[..., tuple[list[int], np.ndarray]]


@dataclass(frozen=True)
class CaseResult:
    """The outcome on one case: an exact TV, or a statistical certificate."""

    case: str
    tv: float | None = None
    paths: int = 0
    statistical: StatisticalCertificate | None = None

    @property
    def passed(self) -> bool:
        if self.tv is not None:
            return self.tv <= EXACT_TV_TOLERANCE
        return self.statistical is not None and self.statistical.passed


@dataclass(frozen=True)
class AuditReport:
    """The verdict on the audited code, with the evidence behind it.

    ``method`` is "exhaustive" (``exhaustive_tv`` is exact; FAIL means TV above
    :data:`EXACT_TV_TOLERANCE`) or "statistical" (``false_alarm_rate`` is the chance an exact rule
    is flagged over the whole audit; ``detectable_tv`` the TV each case detects with probability
    >= 0.99). ``problem`` names a crash or malformed output, which is a FAIL.
    """

    verdict: str
    method: str
    exhaustive_tv: float | None = None
    worst_case: str | None = None
    paths: int = 0
    false_alarm_rate: float | None = None
    detectable_tv: float | None = None
    problem: str | None = None
    cases: list[CaseResult] = field(default_factory=list)


def audit(
    rule: Rule | None = None,
    drafter: Drafter | DrafterFunction | None = None,
    *,
    statistical: bool = False,
    seed: int = 0,
    false_alarm_rate: float = 1e-3,
    cases: Sequence[AuditCase] | None = None,
    on_progress: Callable[[], None] | None = None,
) -> AuditReport:
    """Certify or refute ``rule`` (default: the exact rule) with ``drafter`` (default: sampling).

    ``drafter`` is an object with ``vocab_size`` and ``propose(prefix, k, rng)``, or a plain
    callable ``(draft_model, prefix, k, rng) -> (tokens, q)``; the callable is handed the draft
    model already warped by each case's sampling controls. The audit is exhaustive unless the code
    calls ``uniform()`` or ``statistical`` is set; a statistical audit stops at the first case
    that refutes exactness. ``cases`` replaces the search grid of :func:`audit_cases`.
    """
    rule = rule or exact_rule
    cases = cases or audit_cases(seed, vocab=getattr(drafter, "vocab_size", None))
    progress = on_progress or (lambda: None)
    method = "statistical" if statistical else "exhaustive"
    try:
        if method == "exhaustive":
            try:
                results = []
                for case in cases:
                    results.append(_exhaustive(case, rule, drafter))
                    progress()
                return _report(method, results, false_alarm_rate)
            except NotEnumerable:
                method = "statistical"
        results = []
        for case in cases:
            results.append(_statistical(case, rule, drafter, false_alarm_rate / len(cases)))
            progress()
            if not results[-1].passed:
                break
        return _report(method, results, false_alarm_rate)
    except Exception as error:  # the code under test crashed or emitted malformed output
        return AuditReport("FAIL", method, problem=f"{type(error).__name__}: {error}")


def _exhaustive(
    case: AuditCase, rule: Rule, drafter: Drafter | DrafterFunction | None
) -> CaseResult:
    target, draft = case.models()
    comparison = exact_output_distribution(
        target,
        draft,
        [0],
        case.n_tokens,
        case.k,
        sampling=case.sampling,
        rule=rule,
        drafter=_drafter(drafter, draft, case.sampling),
    )
    return CaseResult(case.name, comparison.tv, comparison.paths)


def _statistical(
    case: AuditCase, rule: Rule, drafter: Drafter | DrafterFunction | None, case_alarm_rate: float
) -> CaseResult:
    target, draft = case.models()
    per_test = case_alarm_rate / 3  # three tests per case (Bonferroni)
    runs = samples_for_power(case.vocab**2, STATISTICAL_TV, per_test, POWER)
    drafter = _drafter(drafter, draft, case.sampling)
    generate = chain_generator(
        target, None, [0], case.k, sampling=case.sampling, rule=rule, drafter=drafter
    )
    certificate = statistical_certificate(
        generate,
        target,
        [0],
        case.k,
        runs,
        case.seed,
        sampling=case.sampling,
        significance=per_test,
    )
    return CaseResult(case.name, statistical=certificate)


def _report(method: str, results: list[CaseResult], false_alarm_rate: float) -> AuditReport:
    verdict = "PASS" if all(r.passed for r in results) else "FAIL"
    paths = sum(r.paths for r in results)
    if method == "exhaustive":
        worst = max(results, key=lambda r: r.tv)
        return AuditReport(verdict, method, worst.tv, worst.case, paths, cases=results)
    failing = [r for r in results if not r.passed]
    detectable = max(max(r.statistical.detectable_tv.values()) for r in results)
    return AuditReport(
        verdict,
        method,
        worst_case=(failing or results)[0].case,
        false_alarm_rate=false_alarm_rate,
        detectable_tv=detectable,
        cases=results,
    )


def _drafter(
    drafter: Drafter | DrafterFunction | None, draft: MarkovModel, sampling: SamplingParams
) -> Drafter:
    if drafter is None:
        return ModelDrafter(draft, sampling)
    if hasattr(drafter, "propose"):
        return drafter
    return _CallableDrafter(drafter, _Warped(draft, sampling))


@dataclass(frozen=True)
class _Warped:
    """A model view whose distributions are already warped by the sampling controls."""

    model: MarkovModel
    sampling: SamplingParams

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    def next_dist(self, prefix: Sequence[int]) -> np.ndarray:
        return self.sampling.warp(self.model.next_dist(prefix))


@dataclass(frozen=True)
class _CallableDrafter:
    """Adapts a plain ``(draft_model, prefix, k, rng)`` function to the drafter interface."""

    function: DrafterFunction
    model: _Warped

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    def propose(
        self, prefix: Sequence[int], k: int, rng: RandomSource
    ) -> tuple[list[int], np.ndarray]:
        return self.function(self.model, prefix, k, rng)
