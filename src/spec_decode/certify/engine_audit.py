"""Audit a whole engine as a black box: run its speculative generation many times and compare
the empirical joint distribution of the first tokens with its own target-only joint.

An engine adapter (:class:`EngineAdapter`) is three things: ``vocab_size``;
``target_probs(prefix, sampling)``, the next-token distribution of the engine's own plain
decoding under ``sampling`` (its sampler chain applied: ``sampling.warp`` for ours); and
``generate(prefix, n_tokens, sampling, seed)``, its speculative generation, doing everything
itself (drafting, verification, caches, random numbers); an adapter may also name the
``prefix`` its audits start from (default ``(0,)``). The auditor computes
the exact joint of the first ``tokens`` tokens from ``target_probs`` (every sequence on a small
vocabulary), draws ``samples`` generations with seeds 0, 1, ..., and tests the counts against
that joint. On a real model's vocabulary the joint is binned: an adapter names ``min_mass``, and
sequences of lower reference probability are pooled into one cell, with whatever mass its rows
leave unlisted (an engine that reports only its most likely tokens):

* a chi-square test at the stated false-alarm rate (cells of small expected count pooled:
  :func:`~spec_decode.certify.goodness_of_fit.chi_square_test`); the verdict is FAIL when it
  rejects, and the report states the TV the test detects with probability 0.99 at this sample
  size (:func:`~spec_decode.certify.goodness_of_fit.detectable_tv`);
* a TV estimate with a 95 % interval. The plug-in TV between the empirical and the exact joint
  is positive from sampling noise alone, so the estimate is the bootstrap's bias-corrected one
  (twice the plug-in TV less the mean of the plug-in TVs of counts redrawn from the empirical
  distribution), with the basic bootstrap interval, both cut at 0; the report also gives the
  95th percentile of the plug-in TV of an exact engine at this sample size (counts drawn from
  the exact joint), against which the plug-in TV itself can be read.

Where nothing is pooled, a sequence the reference gives probability 0 fails the audit outright.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from spec_decode.certify.goodness_of_fit import chi_square_test, detectable_tv
from spec_decode.core.sampling import SamplingParams

#: The most sequences the exact joint may list (vocabulary ** tokens, zeros pruned).
MAX_CELLS = 100_000
#: The power at which the report states the detectable TV.
POWER = 0.99
#: Unlisted mass below this is the rounding of rows that sum to 1 (float32 ones too), not a
#: pooled tail; the joint is renormalized over it.
POOLING_TOLERANCE = 1e-6
#: The cell of every sequence the joint pools (:func:`exact_joint`).
POOLED = ("pooled",)


class EngineAdapter(Protocol):
    """What the auditor needs from an engine (see the module docstring)."""

    vocab_size: int

    def target_probs(self, prefix: Sequence[int], sampling: SamplingParams) -> np.ndarray: ...

    def generate(
        self, prefix: Sequence[int], n_tokens: int, sampling: SamplingParams, seed: int
    ) -> Sequence[int]: ...


@dataclass(frozen=True)
class EngineAuditReport:
    """The verdict on an engine ("PASS" or "FAIL"), with the evidence: how many generations of
    how many tokens, the cells compared, the test's p-value at its false-alarm rate, the TV it
    detects with probability :data:`POWER`, the plug-in TV, the bias-corrected TV estimate with
    its 95 % interval, the 95th percentile of an exact engine's plug-in TV, the seconds taken,
    ``problem`` when the engine emitted what plain decoding never does, and the reference mass
    ``pooled`` into one cell (0 when every sequence is listed)."""

    verdict: str
    samples: int
    tokens: int
    cells: int
    p_value: float
    false_alarm_rate: float
    detectable_tv: float
    plug_in_tv: float
    tv: float
    tv_interval: tuple[float, float]
    exact_tv_95: float
    seconds: float
    problem: str | None = None
    pooled: float = 0.0


def exact_joint(
    engine: EngineAdapter,
    prefix: Sequence[int],
    tokens: int,
    sampling: SamplingParams,
    min_mass: float = 0.0,
) -> tuple[dict[tuple[int, ...], float], float]:
    """The probability of every continuation of ``tokens`` tokens under the engine's plain
    decoding (continuations of probability 0 left out), and the mass pooled: what a row leaves
    unlisted (an engine that reports only its most likely tokens), and continuations below
    ``min_mass``, which are not grown further (the long tail of a real vocabulary)."""
    joint: dict[tuple[int, ...], float] = {(): 1.0}
    pooled = 0.0
    for _ in range(tokens):
        grown: dict[tuple[int, ...], float] = {}
        for sequence, mass in joint.items():
            row = np.asarray(engine.target_probs([*prefix, *sequence], sampling), dtype=float)
            pooled += mass * max(0.0, 1.0 - float(row.sum()))
            for token in np.flatnonzero(row > 0):
                cell = mass * float(row[token])
                if cell < min_mass:
                    pooled += cell
                else:
                    grown[(*sequence, int(token))] = cell
        if len(grown) > MAX_CELLS:
            raise ValueError(
                f"the exact joint has {len(grown):,} sequences, above the limit of "
                f"{MAX_CELLS:,}: audit fewer tokens or a smaller vocabulary"
            )
        joint = grown
    return joint, pooled if pooled > POOLING_TOLERANCE else 0.0


def audit_engine(
    engine: EngineAdapter,
    *,
    prefix: Sequence[int] | None = None,
    tokens: int = 3,
    samples: int = 20_000,
    sampling: SamplingParams | None = None,
    false_alarm_rate: float = 1e-3,
    time_budget_s: float | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> EngineAuditReport:
    """Audit ``engine`` (see the module docstring): ``samples`` generations of ``tokens``
    tokens after ``prefix`` (default: the engine's own ``prefix`` if it names one, else ``(0,)``)
    under ``sampling`` (default temperature 1), seeds 0, 1, ...; stops drawing once
    ``time_budget_s`` seconds have passed (the report says how many it drew); ``on_progress`` is
    called every 1 % of the way with how many were drawn since its last call."""
    if tokens < 1 or samples < 2 or not 0 < false_alarm_rate < 1:
        raise ValueError("need tokens >= 1, samples >= 2 and a false-alarm rate in (0, 1)")
    sampling = sampling or SamplingParams()
    prefix = getattr(engine, "prefix", (0,)) if prefix is None else prefix
    start = time.perf_counter()
    joint, pooled = exact_joint(engine, prefix, tokens, sampling, getattr(engine, "min_mass", 0.0))
    counts: Counter[tuple[int, ...]] = Counter()
    step = max(samples // 100, 1)
    drawn = 0
    for seed in range(samples):
        if time_budget_s is not None and time.perf_counter() - start > time_budget_s:
            break
        emitted = tuple(int(t) for t in engine.generate(list(prefix), tokens, sampling, seed))
        counts[emitted[:tokens]] += 1
        drawn += 1
        if on_progress is not None and drawn % step == 0:
            on_progress(step)
    if pooled:  # what the joint does not list counts in its one pooled cell
        merged: Counter[tuple] = Counter()
        for cell, n in counts.items():
            merged[cell if cell in joint else POOLED] += n
        counts, joint = merged, {**joint, POOLED: pooled}
    seconds = time.perf_counter() - start
    return _report(joint, counts, drawn, tokens, false_alarm_rate, seconds, pooled)


def _report(
    joint: dict[tuple[int, ...], float],
    counts: Counter[tuple[int, ...]],
    drawn: int,
    tokens: int,
    false_alarm_rate: float,
    seconds: float,
    pooled: float = 0.0,
) -> EngineAuditReport:
    unexpected = sorted(set(counts) - set(joint))
    cells = list(joint) + unexpected
    reference = np.array([joint.get(c, 0.0) for c in cells])
    if abs(reference.sum() - 1) > POOLING_TOLERANCE:
        raise ValueError(f"the reference rows sum to {reference.sum():.9f} over the joint, not 1")
    reference /= reference.sum()  # rounding only
    observed = np.array([counts.get(c, 0) for c in cells], dtype=float)
    test = chi_square_test(observed, reference, false_alarm_rate)
    tv = 0.5 * float(np.abs(observed / drawn - reference).sum())
    resampled = _resampled_tv(observed / drawn, reference, drawn)
    problem = None
    if unexpected:
        problem = f"emitted {unexpected[0]}, which plain decoding never does"
    return EngineAuditReport(
        verdict="FAIL" if test.rejected else "PASS",
        samples=drawn,
        tokens=tokens,
        cells=len(joint),
        p_value=test.p_value,
        false_alarm_rate=false_alarm_rate,
        detectable_tv=detectable_tv(drawn, max(len(joint), 2), false_alarm_rate, POWER),
        plug_in_tv=tv,
        tv=max(0.0, 2 * tv - float(np.mean(resampled))),
        tv_interval=(
            max(0.0, 2 * tv - float(np.percentile(resampled, 97.5))),
            max(0.0, 2 * tv - float(np.percentile(resampled, 2.5))),
        ),
        exact_tv_95=float(np.percentile(_resampled_tv(reference, reference, drawn), 95)),
        seconds=seconds,
        problem=problem,
        pooled=pooled,
    )


def _resampled_tv(source: np.ndarray, reference: np.ndarray, drawn: int) -> np.ndarray:
    """The plug-in TV against ``reference`` of ``drawn`` counts redrawn from ``source``, in 400
    seeded rounds: from the empirical distribution for the bootstrap, from the reference itself
    for what an exact engine shows."""
    rng = np.random.default_rng(0)
    redrawn = rng.multinomial(drawn, source / source.sum(), size=400) / drawn
    return 0.5 * np.abs(redrawn - reference).sum(axis=1)
