"""Certify or refute any verification rule and/or drafter.

The auditor runs the real generator with the code under test plugged in, over a search grid of
model pairs chosen to expose bugs (peaked, flat and sparse rows, disjoint supports, a draft that is
zero where the target is not, near ties; vocabularies 2-4; k = 1-3; plain, warped and greedy
sampling). Where the code draws only through ``bernoulli``/``categorical`` it is enumerated
exhaustively and the verdict rests on the exact total-variation distance; code that draws
``uniform()`` is judged by seeded chi-square tests with a stated false-alarm rate and power.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from spec_decode.drafters import Drafter, ModelDrafter
from spec_decode.exhaustive import NotEnumerable, exact_output_distribution
from spec_decode.models import MarkovModel
from spec_decode.randomness import RandomSource
from spec_decode.rules import Rule, exact_rule
from spec_decode.sampling import SamplingParams
from spec_decode.statistical import POWER, StatisticalCertificate, statistical_certificate
from spec_decode.stats import samples_for_power

#: An exhaustive TV above this refutes exactness (our own code stays below 1e-15; the margin
#: absorbs rounding in third-party code that computes in other orders).
EXACT_TV_TOLERANCE = 1e-9
#: The TV the statistical audit is sized to detect with probability >= POWER in every case.
STATISTICAL_TV = 0.05

DrafterFunction = Callable[..., tuple[list[int], np.ndarray]]


@dataclass(frozen=True)
class AuditCase:
    """One model pair and setting of the search grid."""

    kind: str
    vocab: int
    k: int
    sampling: SamplingParams
    seed: int

    @property
    def n_tokens(self) -> int:
        return 4 if self.vocab <= 3 else 3

    @property
    def name(self) -> str:
        return f"{self.kind}, V={self.vocab}, k={self.k}, {_describe(self.sampling)}"

    def models(self) -> tuple[MarkovModel, MarkovModel]:
        return _PAIRS[self.kind](np.random.default_rng(self.seed), self.vocab)


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
    certificate = statistical_certificate(
        target,
        draft,
        [0],
        case.k,
        runs,
        case.seed,
        sampling=case.sampling,
        rule=rule,
        drafter=_drafter(drafter, draft, case.sampling),
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


# ---- the search grid ---------------------------------------------------------------------------


def _rows(rng: np.random.Generator, vocab: int, concentration: float) -> np.ndarray:
    return rng.dirichlet(np.full(vocab, concentration), size=vocab)


def _masked(rows: np.ndarray, keep: np.ndarray) -> np.ndarray:
    keep = keep.copy()
    keep[np.arange(len(keep)), np.argmax(rows * keep + 1e-12 * keep, axis=1)] = True
    masked = rows * keep
    empty = masked.sum(axis=1) == 0
    masked[empty] = keep[empty]
    return masked / masked.sum(axis=1, keepdims=True)


def _disjoint(rng: np.random.Generator, vocab: int) -> tuple[MarkovModel, MarkovModel]:
    in_target = np.array([rng.permutation(vocab) < max(1, vocab // 2) for _ in range(vocab)])
    target = _masked(_rows(rng, vocab, 1.0), in_target)
    draft = _masked(_rows(rng, vocab, 1.0), ~in_target)
    return MarkovModel(target), MarkovModel(draft)


def _near_ties(rng: np.random.Generator, vocab: int) -> tuple[MarkovModel, MarkovModel]:
    rows = _rows(rng, vocab, 1.0)
    top = np.argsort(-rows, axis=1)[:, :2]
    for row, (a, b) in zip(rows, top, strict=True):
        row[b] = row[a] * (1 - 1e-3)
    rows /= rows.sum(axis=1, keepdims=True)
    return MarkovModel(rows), MarkovModel(rows[:, rng.permutation(vocab)])


_PAIRS: dict[str, Callable[[np.random.Generator, int], tuple[MarkovModel, MarkovModel]]] = {
    "peaked": lambda rng, v: (
        lambda t: (MarkovModel(t), MarkovModel(0.5 * t + 0.5 * _rows(rng, v, 0.2)))
    )(_rows(rng, v, 0.2)),
    "flat": lambda rng, v: (MarkovModel(_rows(rng, v, 5.0)), MarkovModel(_rows(rng, v, 5.0))),
    "sparse": lambda rng, v: (
        MarkovModel(_masked(_rows(rng, v, 1.0), rng.random((v, v)) < 0.5)),
        MarkovModel(_masked(_rows(rng, v, 1.0), rng.random((v, v)) < 0.5)),
    ),
    "disjoint supports": _disjoint,
    "draft zero where target positive": lambda rng, v: (
        lambda t: (MarkovModel(t), MarkovModel(_masked(t, rng.random((v, v)) < 0.5)))
    )(_rows(rng, v, 1.0)),
    "near ties": _near_ties,
}

_SAMPLINGS = (
    SamplingParams(),
    SamplingParams(temperature=0.7, top_k=2),
    SamplingParams(top_p=0.8),
    SamplingParams(temperature=0),
)
_SHAPES = ((2, 1), (3, 2), (4, 1), (3, 3), (2, 3), (4, 2))


def audit_cases(seed: int = 0, vocab: int | None = None) -> list[AuditCase]:
    """The search grid: every pair kind plain and warped, rotating through shapes and controls.

    With ``vocab`` given (a drafter bound to its own vocabulary), every case uses it.
    """
    cases = []
    for i, (kind, warped) in enumerate(itertools.product(_PAIRS, (False, True))):
        size, k = _SHAPES[i % len(_SHAPES)]
        sampling = _SAMPLINGS[1 + (i // 2) % (len(_SAMPLINGS) - 1)] if warped else _SAMPLINGS[0]
        cases.append(AuditCase(kind, vocab or size, k, sampling, seed + i))
    return cases


def _describe(sampling: SamplingParams) -> str:
    if sampling.greedy:
        return "greedy"
    if sampling.is_identity:
        return "plain"
    parts = [f"temperature {sampling.temperature:g}"] if sampling.temperature != 1 else []
    parts += [f"top-k {sampling.top_k}"] if sampling.top_k is not None else []
    parts += [f"top-p {sampling.top_p:g}"] if sampling.top_p < 1 else []
    parts += [f"min-p {sampling.min_p:g}"] if sampling.min_p > 0 else []
    return ", ".join(parts)
