"""What an audit is asked and what it answers: its settings and budgets, each case's result, and
the report with the verdict (:mod:`~spec_decode.certify.audit` runs it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from spec_decode.certify.statistical import StatisticalCertificate
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
