"""Certify or refute any verification rule (chain or tree) and/or drafter.

The auditor runs the real generator with the code under test plugged in (through the adapters of
:mod:`spec_decode.certify.adapters`) over the search grid of :func:`~spec_decode.certify.grid.
audit_cases`: peaked, flat and sparse rows, disjoint supports, a draft zero where the target is
not, near ties, a deterministic draft; vocabularies 2-6; k = 1-8; plain, warped and greedy.

**Exhaustive** (whenever the code draws through ``bernoulli``/``categorical`` or compares its
``uniform()`` draws with thresholds): every case is enumerated, the self-checks of
:mod:`~spec_decode.certify.enumeration` hold, and the verdict is FAIL when the exact TV exceeds
``tolerance`` in any case. Each case has a budget of :data:`CASE_PATHS` paths and
:data:`CASE_SECONDS` seconds. The report also gives the TV of the exact rule fed the same inputs
rounded to float32 on the worst case, so rounding is told apart from bias.

**Statistical** (when the code uses a uniform otherwise, a case exceeds its budget, or on
request): one chi-square test per case of the joint distribution of the first k + 3 tokens. The
family-wise false-alarm rate is ``false_alarm_rate`` (Bonferroni over the cases). Sizing rule: each
case draws the samples that detect TV >= :data:`STATISTICAL_TV` with probability >= 0.99
(noncentral chi-square bound), but at most its share of :data:`STATISTICAL_RUNS` (a few minutes
in all); the TV it does detect at that power is reported per case, with the p-values.

**Isolated** (``isolate=True``; the command line always isolates): the code under test runs in a
child process (:mod:`~spec_decode.certify.isolation`) with a time limit per case and overall, so
it can neither end the audit (``SystemExit``, ``KeyboardInterrupt``: a FAIL, like any crash) nor
outlast it (a hang, or a child that dies: verdict ERROR, no verdict reached). In this process
(the default, for callers that audit closures and lambdas) a ``SystemExit`` from the code is a
FAIL too, but a ``KeyboardInterrupt`` ends the audit, since it may be the user's.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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
from spec_decode.certify.statistical import POWER, StatisticalCertificate, joint_certificate
from spec_decode.core.protocols import Drafter
from spec_decode.core.rules import exact_rule
from spec_decode.core.tree import TreeShape

#: Default bound on the exact TV (our own code stays below 1e-15; the margin absorbs rounding in
#: float64 code that computes in other orders). Float32 code needs ``tolerance`` ~1e-6.
EXACT_TV_TOLERANCE = 1e-9
#: Per-case enumeration budget; past it the audit turns statistical and says so. The path count
#: is the binding, deterministic limit; the seconds (CPU time, which other processes on the
#: machine do not consume) are a safety net set well above what any grid case takes, so a
#: verdict does not depend on the machine's load.
CASE_PATHS = 50_000
CASE_SECONDS = 120.0
#: The TV the statistical audit is sized to detect with probability >= POWER in every case ...
STATISTICAL_TV = 0.01
#: ... within this many generator runs over the whole audit (about 1-3 ms each).
STATISTICAL_RUNS = 120_000
#: The tree shape tree rules are audited on: two candidates at the root, one below each.
TREE_SHAPE = TreeShape((2, 1))


@dataclass(frozen=True)
class CaseResult:
    """The outcome on one case: an exact TV, or a statistical certificate."""

    case: str
    tv: float | None = None
    paths: int = 0
    statistical: StatisticalCertificate | None = None
    tolerance: float = EXACT_TV_TOLERANCE

    @property
    def passed(self) -> bool:
        if self.tv is not None:
            return self.tv <= self.tolerance
        return self.statistical is not None and self.statistical.passed

    @property
    def p_value(self) -> float | None:
        if self.statistical is None:
            return None
        return min(test.p_value for test in self.statistical.tests.values())


@dataclass(frozen=True)
class AuditReport:
    """The verdict on the audited code, with the evidence behind it.

    ``verdict`` is "PASS", "FAIL", or "ERROR" when no verdict was reached (an isolated audit
    whose code under test ran past a time limit or ended its process; ``problem`` says which
    case and why). ``method`` is "exhaustive" (``exhaustive_tv`` is exact; FAIL means TV above
    ``tolerance``; ``rounding_tv`` is the exact rule's TV on float32-rounded inputs in the worst
    case) or "statistical" (``fallback`` says why, when not asked for; ``false_alarm_rate`` is
    the chance an exact rule is flagged over the whole audit; ``detectable_tv`` the largest TV a
    case detects only with probability < 0.99; ``min_p_value`` the smallest p-value).
    ``worst_case`` is the case with the largest TV, or the smallest p-value. ``problem`` names a
    crash or malformed output (a FAIL) with the case, the inputs and the last frame.
    """

    verdict: str
    method: str
    exhaustive_tv: float | None = None
    worst_case: str | None = None
    paths: int = 0
    false_alarm_rate: float | None = None
    detectable_tv: float | None = None
    problem: str | None = None
    tolerance: float = EXACT_TV_TOLERANCE
    rounding_tv: float | None = None
    min_p_value: float | None = None
    fallback: str | None = None
    cases: list[CaseResult] = field(default_factory=list)


@dataclass(frozen=True)
class AuditSettings:
    """How to audit, whatever the code: see :func:`audit` for each field."""

    statistical: bool = False
    seed: int = 0
    false_alarm_rate: float = 1e-3
    tolerance: float = EXACT_TV_TOLERANCE
    statistical_runs: int = STATISTICAL_RUNS


#: Called as each case starts, with its name and the method ("exhaustive" or "statistical").
StartCallback = Callable[[str, str], None]


def audit(
    rule: Callable[..., Any] | None = None,
    drafter: Drafter | DrafterFunction | None = None,
    *,
    tree_rule: Callable[..., Any] | None = None,
    statistical: bool = False,
    seed: int = 0,
    false_alarm_rate: float = 1e-3,
    tolerance: float = EXACT_TV_TOLERANCE,
    cases: Sequence[AuditCase] | None = None,
    on_case: Callable[[CaseResult], None] | None = None,
    statistical_runs: int = STATISTICAL_RUNS,
    isolate: bool = False,
    case_timeout: float | None = None,
    timeout: float | None = None,
) -> AuditReport:
    """Certify or refute ``rule`` (default: the exact rule) with ``drafter`` (default: sampling),
    or the tree rule ``tree_rule`` (our tree drafter, shape :data:`TREE_SHAPE`).

    ``rule(p, q, draft_tokens, rng)`` (and ``tree_rule(p, tree, rng)``) may take a ``sampling``
    keyword (the case's controls) and return a list, array or tensor of token ids. ``drafter`` is
    an object with ``vocab_size`` and ``propose(prefix, k, rng)``, or a plain callable
    ``(draft_model, prefix, k, rng) -> (tokens, q)`` handed the draft model already warped.
    ``cases`` replaces the grid; ``on_case`` is called with each case's result as it finishes;
    ``statistical_runs`` is the statistical audit's run budget over all cases. Any integer
    ``seed`` is accepted (folded into numpy's seed space).

    ``isolate`` runs the code in a child process (it must then be picklable: module-level
    functions and objects are), stopped past ``case_timeout`` seconds on one case or
    ``timeout`` seconds in all (defaults :data:`~spec_decode.certify.isolation.CASE_TIMEOUT`
    and :data:`~spec_decode.certify.isolation.AUDIT_TIMEOUT`) with the verdict ERROR.
    """
    settings = AuditSettings(statistical, seed, false_alarm_rate, tolerance, statistical_runs)
    if isolate:
        from spec_decode.certify.isolation import AuditJob, IsolatedAuditor

        job = AuditJob(rule, drafter, tree_rule, cases=cases, settings=settings)
        with IsolatedAuditor(case_timeout, timeout) as auditor:
            return auditor.audit(job, on_case=on_case)
    if case_timeout is not None or timeout is not None:
        raise ValueError("case_timeout and timeout need isolate=True (a child process to stop)")
    return audit_here(rule, drafter, tree_rule, settings, cases, on_case=on_case)


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
