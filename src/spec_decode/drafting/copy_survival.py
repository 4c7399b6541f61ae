"""How far a deterministic drafter's proposal will be accepted, judged from what it proposed
before against what was emitted since (:func:`copy_survival`; the auto planner's estimate, see
:mod:`spec_decode.drafting.auto` for why this needs no trial)."""

from __future__ import annotations

import math

from spec_decode.core.checks import leading_matches
from spec_decode.core.trace import Trace

#: Streak lengths are pooled in buckets 0, 1-2, 3-6, 7-14, 15-30, 31-62, 63+ (``log2(s + 1)``).
STREAK_BUCKETS = 7


def streak_bucket(streak: int) -> int:
    """The bucket of a streak of ``streak`` right tokens in a row (:data:`STREAK_BUCKETS`)."""
    return min(int(math.log2(streak + 1)), STREAK_BUCKETS - 1)


def copy_survival(
    trace: Trace,
    name: str,
    depth: int,
    prior_alpha: float,
    prior_weight: float,
    last_steps: int,
    caution: float = 1.0,
) -> list[float]:
    """S(1), ..., S(``depth``): for deterministic drafter ``name``, the estimated chance that the
    first i tokens of its proposal now are all accepted, from what it proposed at each of the
    last ``last_steps`` steps against the tokens emitted since.

    A copy's next token is right with a chance that grows with how many tokens in a row the
    drafter has had right just before it (its streak): right after an edit or in prose a copy
    often misses, forty tokens into re-emitted code it almost never does. So every emitted
    token is an observation (right or wrong) of the hazard at the streak it was reached with,
    and S(i) multiplies the estimated rates at the streaks the proposal would reach:
    h(streak now) * h(streak now + 1) * ...

    Streaks are pooled in :func:`streak_bucket`; each bucket's rate is a Beta posterior mean
    whose prior mean is the posterior mean of the bucket below (the first bucket's is
    ``prior_alpha``), weight ``prior_weight``: a longer streak is taken to be as reliable as a
    shorter one until tokens at that streak say otherwise, which lets a copy be drafted far
    before plain passes have shown tokens that deep. ``caution`` standard deviations of the
    posterior are subtracted from each rate: a long block that misses costs many passes, so a
    rate seen on few tokens counts for less.

    A token is predicted when a proposal in the window whose first m tokens match the emitted
    ones covers it (one of the m); it is observed once, for the first proposal that reached it
    (its m matches, then the token after them, if emitted and proposed): consecutive proposals
    during a copy are the same text shifted by a token, and counting their overlap again and
    again would let a few plain passes outweigh every later miss. When the drafter was used,
    each step's outcome is exactly its verification outcome. Tokens not yet emitted are not
    counted.
    """
    if depth == 0:
        return []  # nothing proposed now: no need to read the window (the planner asks every step)
    first = max(0, trace.target_passes - last_steps)
    end = len(trace.tokens)
    base = trace.starts[first] if first < trace.target_passes else end
    predicted = [False] * (end - base)
    reached: list[tuple[int, int, int]] = []  # (start, matched, proposed) of each step
    for i in range(first, trace.target_passes):
        proposal = trace.proposals[i].get(name, ())
        start = trace.starts[i]
        matched = leading_matches(proposal, trace.tokens[start : start + len(proposal)])
        predicted[start - base : start - base + matched] = [True] * matched
        reached.append((start, matched, len(proposal)))
    streak = [0] * (end - base + 1)  # streak[t - base]: right in a row just before position t
    for t, right in enumerate(predicted):
        streak[t + 1] = streak[t] + 1 if right else 0
    right_at = [0] * STREAK_BUCKETS
    seen_at = [0] * STREAK_BUCKETS
    observed = base  # tokens before this position were counted already
    for start, matched, proposed in reached:
        stop = min(start + matched + 1, start + proposed, end)  # the matches, then the miss
        for t in range(max(start, observed), stop):
            bucket = streak_bucket(streak[t - base])
            seen_at[bucket] += 1
            right_at[bucket] += t < start + matched
        observed = max(observed, stop)
    rates, prior = [], prior_alpha
    for right, seen in zip(right_at, seen_at, strict=True):
        weight = seen + prior_weight
        mean = (right + prior_weight * prior) / weight
        rates.append(max(0.0, mean - caution * math.sqrt(mean * (1 - mean) / (weight + 1))))
        prior = mean
    survival, now, alive = [], streak[-1], 1.0
    for d in range(depth):
        alive *= rates[streak_bucket(now + d)]
        survival.append(alive)
    return survival
