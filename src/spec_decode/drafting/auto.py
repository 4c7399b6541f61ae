"""The auto policy: before each step, the drafter and k that maximise expected tokens per second.

Options considered before every step:

* a plain target pass (k = 0): 1 token for ``cost(1)``;
* each deterministic drafter (prompt lookup, suffix): its proposal is computed first (free, and
  its length is known before verifying), then every prefix of it of length j is worth
  1 + S(1) + ... + S(j) tokens for ``cost(j + 1)``, S(i) being the estimated chance that its
  first i tokens are all accepted (:func:`copy_survival`);
* the draft model, k = 1..k_max: E(alpha, k) tokens for ``cost(k + 1) + k * draft_seconds``.

E(a, j) = 1 + a + ... + a^j is the expected tokens of a pass that verifies j drafts each
accepted with probability a (:func:`~spec_decode.drafting.policies.expected_tokens_per_pass`),
``cost`` the calibrated :class:`~spec_decode.drafting.costs.CostCurve`. The option with the most
expected tokens per second wins if it beats a plain pass by ``margin``; ties go to the cheaper
option listed first, so with no evidence of gain the policy decodes plainly. Where a draft token
costs a large fraction of a target token and a 2-token pass far more than a 1-token one (a CPU),
no acceptance rate makes the draft model pay, and it is never chosen
(:func:`draft_model_can_pay`).

Acceptance is estimated over recent steps, with a Beta prior. For the draft model it
is one rate, from the drafts it actually had verified
(:func:`~spec_decode.drafting.policies.estimated_alpha`). A deterministic drafter needs no trial
at all: every step records what it would have proposed (``Step.proposals``), and the tokens
emitted since then say how much of that proposal the target would have accepted. This is sound,
not a heuristic: whatever the policy did, the output is distributed as target-only sampling, so
the next emitted token equals a proposed token x with probability p(x), which is exactly the
chance the exact rule accepts a one-hot draft of x; the same holds token by token along the
proposal, so "the first i tokens would all have been accepted" is "the first i emitted tokens
equal them". Its estimate is a survival curve from the chance that a copy's next token is right
given how many it has had right in a row (:func:`copy_survival`). So lookup and suffix are judged
while plain passes run, and chosen once their recent proposals have been right, as far as the
draft reaches, often enough to pay on this curve: a block of up to 64 tokens deep into a copy,
none where the copy has just broken off.

Exactness: the choice reads the context, the trace and the fixed curve, never the clock nor the
step's own random draws, so :func:`~spec_decode.core.steps.planned_step` stays exact; the
exhaustive and statistical certificates run this planner with a fixed curve.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from spec_decode.core.checks import leading_matches
from spec_decode.core.protocols import DeterministicDrafter, Drafter, Plan
from spec_decode.core.trace import Trace
from spec_decode.drafting.costs import CostCurve
from spec_decode.drafting.lookup import PromptLookupDrafter
from spec_decode.drafting.policies import estimated_alpha, expected_tokens_per_pass
from spec_decode.drafting.suffix import SuffixDrafter, SuffixHistory

#: How much better than a plain pass an option's expected rate must be to be chosen.
MARGIN = 0.1
#: The match length from which prompt lookup's proposals are judged apart from shorter matches'.
LONG_MATCH = 8
#: The prior mean of a long match's rate: eight tokens copied right just before a proposal are
#: evidence already (short matches and the suffix drafter start at the planner's 0.5).
LONG_MATCH_PRIOR = 0.9


@dataclass(frozen=True)
class AutoPlanner:
    """Chooses the drafter and k (0 included) that maximise expected tokens per second.

    Parameters
    ----------
    costs
        The calibrated cost curve (fixed during a run).
    drafters
        The drafters by name. Every one except ``model`` must be a
        :class:`~spec_decode.drafting.drafters.DeterministicDrafter` (no randomness, one-hot q,
        ``propose_tokens``) and satisfy ``propose(c, j) == propose(c, k)[:j]``.
    model
        The name of the draft-model drafter in ``drafters``, or ``None`` when there is none;
        needs ``costs.draft_seconds``.
    k_max
        The most tokens drafted in one step.
    prior_alpha, prior_weight
        The Beta prior of every drafter's acceptance: mean and weight in trials.
    priors
        A prior mean by drafter name, in place of ``prior_alpha`` (a copy drafter whose
        proposals follow a long match starts out trusted further).
    memory
        Only the last ``memory`` steps inform the draft model's acceptance estimate.
    copy_memory
        Only the last ``copy_memory`` steps inform a deterministic drafter's (longer: each emitted
        token is evidence once, see :func:`copy_survival`, so a plain pass adds little).
    caution
        Standard deviations subtracted from a copy drafter's estimated rates
        (:func:`copy_survival`).
    margin
        Draft only when the best option's expected rate beats a plain pass by this fraction:
        estimates from a few recent steps are noisy, and a CPU's curve leaves drafting little
        little room to gain.
    """

    costs: CostCurve
    drafters: Mapping[str, Drafter | DeterministicDrafter]
    model: str | None = None
    k_max: int = 16
    prior_alpha: float = 0.5
    prior_weight: float = 2.0
    priors: Mapping[str, float] = field(default_factory=dict)
    memory: int = 8
    copy_memory: int = 64
    caution: float = 1.0
    margin: float = MARGIN

    def __post_init__(self) -> None:
        if not self.drafters or len({d.vocab_size for d in self.drafters.values()}) != 1:
            raise ValueError("the auto policy needs drafters, all over one vocabulary")
        for name, drafter in self.drafters.items():
            if name != self.model and not hasattr(drafter, "propose_tokens"):
                raise ValueError(f"drafter {name!r} is not deterministic (no propose_tokens)")
        if self.model is not None:
            if self.model not in self.drafters:
                raise ValueError(f"the model drafter {self.model!r} is not among the drafters")
            if self.costs.draft_seconds is None:
                raise ValueError("a draft model needs costs.draft_seconds")
        if self.k_max < 0 or min(self.memory, self.copy_memory) < 1 or self.margin < 0:
            raise ValueError(
                f"need k_max >= 0, memory and copy_memory >= 1 and margin >= 0, got "
                f"{self.k_max}, {self.memory}, {self.copy_memory}, {self.margin}"
            )
        if not 0 <= self.prior_alpha <= 1 or not self.prior_weight > 0:
            raise ValueError(
                f"need prior_alpha in [0, 1] and prior_weight > 0, got {self.prior_alpha}, "
                f"{self.prior_weight}"
            )
        if not all(0 <= prior <= 1 for prior in self.priors.values()) or self.caution < 0:
            raise ValueError(f"need priors in [0, 1] and caution >= 0, got {self.priors}")

    @property
    def vocab_size(self) -> int:
        """The drafters' common vocabulary size."""
        return next(iter(self.drafters.values())).vocab_size

    def plan(self, context: list[int], trace: Trace, k_max: int) -> Plan:
        """The drafter and k with the most expected tokens per second (("", 0): a plain target
        pass), with every deterministic drafter's proposal (at most ``k_max`` tokens).

        The first step of a generation is a plain pass, planned without asking any drafter: it
        reads the prompt, and its token is the first to stream, as soon as target-only decoding
        would stream it (drafts scored in the same call would delay it by their cost, and so
        would a drafter indexing a long prompt before it)."""
        cap = min(self.k_max, k_max)
        best, best_rate = ("", 0), (1.0 + self.margin) / self.costs.target(1)
        if cap == 0 or trace.target_passes == 0:
            return Plan(*best)
        proposals = {
            name: drafter.propose_tokens(context, cap)
            for name, drafter in self.drafters.items()
            if name != self.model
        }
        for name, proposal in proposals.items():
            survival = copy_survival(
                trace,
                name,
                len(proposal),
                self.priors.get(name, self.prior_alpha),
                self.prior_weight,
                self.copy_memory,
                self.caution,
            )
            expected = 1.0
            for j, surviving in enumerate(survival, start=1):
                expected += surviving
                rate = expected / self.costs.target(j + 1)
                if rate > best_rate:
                    best, best_rate = (name, j), rate
        if self.model is not None:
            alpha = estimated_alpha(
                trace, self.prior_alpha, self.prior_weight, self.model, self.memory
            )
            draft = self.costs.draft_seconds or 0.0
            for k in range(1, cap + 1):
                rate = expected_tokens_per_pass(alpha, k) / (self.costs.target(k + 1) + k * draft)
                if rate > best_rate:
                    best, best_rate = (self.model, k), rate
        return Plan(*best, proposals)


def draft_model_can_pay(
    costs: CostCurve, draft_seconds: float, k_max: int, margin: float = MARGIN
) -> bool:
    """Whether a draft model costing ``draft_seconds`` a token could ever be chosen on this
    curve: whether some k <= ``k_max`` beats a plain pass by ``margin`` even with every draft
    accepted. When it cannot, :class:`AutoPlanner` never drafts with it (the model's option is
    taken only when it beats a plain pass, and acceptance 1 is its best case), so the model need
    not be loaded at all."""
    plain = (1 + margin) / costs.target(1)
    return any(
        expected_tokens_per_pass(1.0, k) / (costs.target(k + 1) + k * draft_seconds) > plain
        for k in range(1, k_max + 1)
    )


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


def longest_proposal(costs: CostCurve, k_max: int) -> int:
    """The most tokens a copy drafter proposes: ``k_max``, and no further than the longest pass
    ``costs`` measured."""
    return max(1, min(k_max, costs.sizes[-1] - 1))


def suffix_drafter(
    costs: CostCurve, vocab_size: int, k_max: int, history: SuffixHistory | None
) -> SuffixDrafter:
    """The auto planner's suffix drafter (matches of 2 to 8 tokens, reading ``history``)."""
    return SuffixDrafter(
        vocab_size,
        max_match=8,
        max_tokens=longest_proposal(costs, k_max),
        min_match=2,
        history=history,
    )


def auto_planner(
    costs: CostCurve,
    vocab_size: int,
    model_drafter: Drafter | None = None,
    k_max: int = 16,
    history: SuffixHistory | None = None,
    suffix: SuffixDrafter | None = None,
) -> AutoPlanner:
    """The default auto planner: prompt lookup of short and of long matches, the suffix drafter
    (reading ``history``, the earlier requests' sequences, when given), plus ``model_drafter``
    (named "draft") when given, drafting at most ``k_max`` tokens a step.

    Lookup and suffix match at least 2 tokens: a one-token match is right too rarely to pay (see
    :class:`~spec_decode.drafting.suffix.SuffixDrafter`). "long_lookup" proposes only after a
    match of :data:`LONG_MATCH` tokens and is judged on its own record: where the output is
    re-emitting text verbatim (an edit returning the whole code), a long match continues right
    far more often than the short matches whose mixed record the planner would otherwise
    apply, so the copy resumes as soon as the output rejoins the text after a change; its
    prior mean is :data:`LONG_MATCH_PRIOR`. All propose no further than the longest pass
    ``costs`` measured: beyond it the cost is extrapolated, not known. ``suffix`` is a suffix
    drafter kept from earlier requests (:func:`suffix_drafter`, the same arguments), in place of
    a new one."""
    longest = longest_proposal(costs, k_max)
    if suffix is None:
        suffix = suffix_drafter(costs, vocab_size, k_max, history)
    drafters: dict[str, Drafter] = {
        "lookup": PromptLookupDrafter(vocab_size, min_ngram=2, max_tokens=longest),
        "suffix": suffix,
        "long_lookup": PromptLookupDrafter(
            vocab_size, min_ngram=LONG_MATCH, max_ngram=LONG_MATCH, max_tokens=longest
        ),
    }
    if model_drafter is not None:
        drafters["draft"] = model_drafter
    return AutoPlanner(
        costs,
        drafters,
        None if model_drafter is None else "draft",
        k_max,
        priors={"long_lookup": LONG_MATCH_PRIOR},
    )
