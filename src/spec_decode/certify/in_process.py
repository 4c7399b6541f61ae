"""The audit in this process: the grid's cases run one by one through the real generator with
the code under test plugged in, exhaustively or statistically (see
:mod:`~spec_decode.certify.audit` for the method, :mod:`~spec_decode.certify.isolation` for the
same run in a child process)."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from spec_decode.certify.adapters import (
    AuditedRule,
    AuditedTreeRule,
    DrafterFunction,
    audited_drafter,
)
from spec_decode.certify.enumeration import EnumerationBudgetExceeded, NotEnumerable
from spec_decode.certify.exhaustive import exact_distribution
from spec_decode.certify.generators import Generate, chain_generator, tree_generator
from spec_decode.certify.goodness_of_fit import samples_for_power
from spec_decode.certify.grid import AuditCase, audit_cases
from spec_decode.certify.reference import ExactComparison
from spec_decode.certify.report import (
    CASE_PATHS,
    CASE_SECONDS,
    STATISTICAL_TV,
    TREE_SHAPE,
    AuditReport,
    AuditSettings,
    CaseResult,
    StartCallback,
)
from spec_decode.certify.statistical import POWER, joint_certificate
from spec_decode.core.protocols import Drafter
from spec_decode.core.rules import exact_rule


def audit_here(
    rule: Callable[..., Any] | None,
    drafter: Drafter | DrafterFunction | None,
    tree_rule: Callable[..., Any] | None,
    settings: AuditSettings,
    cases: Sequence[AuditCase] | None = None,
    *,
    on_start: StartCallback | None = None,
    on_case: Callable[[CaseResult], None] | None = None,
    crashes: tuple[type[BaseException], ...] = (Exception, SystemExit),
) -> AuditReport:
    """:func:`audit` in this process. An exception of a type in ``crashes`` raised while the
    code under test runs is a FAIL naming it; the isolated child passes ``BaseException``."""
    if cases is None:
        cases = audit_cases(settings.seed, vocab=getattr(drafter, "vocab_size", None))
        if tree_rule is not None:  # trees: the small vocabularies, where their paths stay few
            cases = [c for c in cases if c.vocab <= 3 and c.k <= 2]
    run = _Runner(
        rule or exact_rule,
        drafter,
        tree_rule,
        on_start or (lambda name, method: None),
        on_case or (lambda result: None),
    )
    fallback = "requested" if settings.statistical else None
    try:
        if not settings.statistical:
            try:
                results = [run.exhaustive(case, settings.tolerance) for case in cases]
                return _exhaustive_report(results, run, cases, settings.tolerance)
            except (NotEnumerable, EnumerationBudgetExceeded) as reason:
                fallback = f"{type(reason).__name__}: {reason}"
        results = []
        alarm_rate = settings.false_alarm_rate
        runs = max(settings.statistical_runs // len(cases), 1)
        for case in cases:
            results.append(run.statistical(case, alarm_rate / len(cases), runs))
            if not results[-1].passed:
                break
        return _statistical_report(results, alarm_rate, fallback)
    except crashes as error:  # the code under test crashed or emitted malformed output
        return AuditReport(
            "FAIL", "statistical" if fallback else "exhaustive", problem=run.crash(error)
        )


class _Runner:
    """Builds each case's generator around the audited code and remembers the last case and
    inputs, for crash reports."""

    def __init__(
        self,
        rule: Callable[..., Any],
        drafter: Drafter | DrafterFunction | None,
        tree_rule: Callable[..., Any] | None,
        on_start: StartCallback,
        on_case: Callable[[CaseResult], None],
    ) -> None:
        self.rule, self.drafter, self.tree_rule = rule, drafter, tree_rule
        self.on_start, self.on_case = on_start, on_case
        self.case: AuditCase | None = None
        self.adapter: AuditedRule | AuditedTreeRule | None = None

    def generator(self, case: AuditCase, rule: Callable[..., Any] | None = None) -> Generate:
        self.case = case
        target, draft = case.models()
        if self.tree_rule is not None:
            self.adapter = AuditedTreeRule(self.tree_rule, case.sampling)
            return tree_generator(
                target, draft, [0], TREE_SHAPE, sampling=case.sampling, rule=self.adapter
            )
        self.adapter = AuditedRule(rule or self.rule, case.sampling)
        drafter = audited_drafter(self.drafter, draft, case.sampling)
        return chain_generator(
            target, None, [0], case.k, sampling=case.sampling, rule=self.adapter, drafter=drafter
        )

    def exhaustive(self, case: AuditCase, tolerance: float) -> CaseResult:
        comparison = self.enumerate(case)
        result = CaseResult(case.name, comparison.tv, comparison.paths, tolerance=tolerance)
        self.on_case(result)
        return result

    def enumerate(self, case: AuditCase, rule: Callable[..., Any] | None = None) -> ExactComparison:
        self.on_start(case.name, "exhaustive")
        generate = self.generator(case, rule)
        target, _ = case.models()
        return exact_distribution(
            generate,
            target,
            [0],
            case.n_tokens,
            case.sampling,
            max_paths=CASE_PATHS,
            max_seconds=CASE_SECONDS,
        )

    def statistical(self, case: AuditCase, alarm_rate: float, max_runs: int) -> CaseResult:
        self.on_start(case.name, "statistical")
        generate = self.generator(case)
        target, _ = case.models()
        block = len(TREE_SHAPE.widths) if self.tree_rule is not None else case.k
        n_tokens = block + 3
        cells = case.vocab**n_tokens
        runs = min(samples_for_power(cells, STATISTICAL_TV, alarm_rate, POWER), max_runs)
        certificate = joint_certificate(
            generate,
            target,
            [0],
            n_tokens,
            runs,
            case.seed,
            sampling=case.sampling,
            significance=alarm_rate,
        )
        result = CaseResult(case.name, statistical=certificate)
        self.on_case(result)
        return result

    def crash(self, error: BaseException) -> str:
        frame = traceback.extract_tb(error.__traceback__)[-1]
        where = f"{frame.filename}:{frame.lineno} in {frame.name}"
        case = self.case.name if self.case else "before the first case"
        inputs = getattr(self.adapter, "last_inputs", None) or "none yet"
        what = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        if not isinstance(error, Exception):  # SystemExit, KeyboardInterrupt
            what += " (raised by the code under test, which would have ended the audit)"
        return f"{what} (case: {case}; last rule inputs: {inputs}; raised at {where})"


def _float32_inputs(p: np.ndarray, q: np.ndarray, draft_tokens: Sequence[int], rng: Any) -> Any:
    """The exact rule fed p and q rounded to float32: the TV any float32 code reaches anyway."""
    return exact_rule(
        p.astype(np.float32).astype(float), q.astype(np.float32).astype(float), draft_tokens, rng
    )


def _exhaustive_report(
    results: list[CaseResult], run: _Runner, cases: Sequence[AuditCase], tolerance: float
) -> AuditReport:
    worst_index = max(range(len(results)), key=lambda i: results[i].tv or 0.0)
    worst = results[worst_index]
    rounding = None
    if run.tree_rule is None:
        rounding = run.enumerate(cases[worst_index], _float32_inputs).tv
    return AuditReport(
        "PASS" if all(r.passed for r in results) else "FAIL",
        "exhaustive",
        worst.tv,
        worst.case,
        sum(r.paths for r in results),
        tolerance=tolerance,
        rounding_tv=rounding,
        cases=results,
    )


def _statistical_report(
    results: list[CaseResult], false_alarm_rate: float, fallback: str | None
) -> AuditReport:
    worst = min(results, key=lambda r: r.p_value)
    return AuditReport(
        "PASS" if all(r.passed for r in results) else "FAIL",
        "statistical",
        worst_case=worst.case,
        false_alarm_rate=false_alarm_rate,
        detectable_tv=max(max(r.statistical.detectable_tv.values()) for r in results),
        min_p_value=worst.p_value,
        fallback=fallback,
        cases=results,
    )
