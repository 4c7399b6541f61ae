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

from collections.abc import Callable, Sequence
from typing import Any

from spec_decode.certify.adapters import DrafterFunction
from spec_decode.certify.grid import AuditCase
from spec_decode.certify.in_process import audit_here
from spec_decode.certify.isolation import AuditJob, IsolatedAuditor
from spec_decode.certify.report import (
    CASE_PATHS,
    CASE_SECONDS,
    EXACT_TV_TOLERANCE,
    STATISTICAL_RUNS,
    STATISTICAL_TV,
    TREE_SHAPE,
    AuditReport,
    AuditSettings,
    CaseResult,
)
from spec_decode.core.protocols import Drafter

__all__ = [
    "CASE_PATHS",
    "CASE_SECONDS",
    "EXACT_TV_TOLERANCE",
    "STATISTICAL_RUNS",
    "STATISTICAL_TV",
    "TREE_SHAPE",
    "AuditReport",
    "AuditSettings",
    "CaseResult",
    "audit",
]


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
        job = AuditJob(rule, drafter, tree_rule, cases=cases, settings=settings)
        with IsolatedAuditor(case_timeout, timeout) as auditor:
            return auditor.audit(job, on_case=on_case)
    if case_timeout is not None or timeout is not None:
        raise ValueError("case_timeout and timeout need isolate=True (a child process to stop)")
    return audit_here(rule, drafter, tree_rule, settings, cases, on_case=on_case)
