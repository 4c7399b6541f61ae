"""The auto policy: before each step, the drafter and k that maximise expected tokens per second.

Options considered before every step:

* a plain target pass (k = 0): 1 token for ``cost(1)``;
* each deterministic drafter (prompt lookup, suffix): its proposal is computed first (free, and
  its length is known before verifying), then every prefix of it of length j is worth
  1 + S(1) + ... + S(j) tokens for ``cost(j + 1)``, S(i) being the estimated chance that its
  first i tokens are all accepted (:func:`counterfactual_survival`);
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
equal them". Its estimate is a survival curve by depth from two rates, the first token's and each
later token's (:func:`counterfactual_survival`). So lookup and suffix are judged
while plain passes run, and chosen once their recent proposals have been right, as far as the
draft reaches, often enough to pay on this curve.

Exactness: the choice reads the context, the trace and the fixed curve, never the clock nor the
step's own random draws, so :func:`~spec_decode.core.generate.planned_step` stays exact; the
exhaustive and statistical certificates run this planner with a fixed curve.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

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
    memory
        Only the last ``memory`` steps inform the draft model's acceptance estimate.
    copy_memory
        Only the last ``copy_memory`` steps inform a deterministic drafter's (longer: each emitted
        token is evidence once, see :func:`counterfactual_survival`, so a plain pass adds little).
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
    memory: int = 8
    copy_memory: int = 32
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

    @property
    def vocab_size(self) -> int:
        """The drafters' common vocabulary size."""
        return next(iter(self.drafters.values())).vocab_size

    def plan(self, context: list[int], trace: Trace, k_max: int) -> Plan:
        """The drafter and k with the most expected tokens per second (("", 0): a plain target
        pass), with every deterministic drafter's proposal (at most ``k_max`` tokens)."""
        cap = min(self.k_max, k_max)
        best, best_rate = ("", 0), (1.0 + self.margin) / self.costs.target(1)
        proposals: dict[str, list[int]] = {}
        if cap == 0:
            return Plan(*best)
        for name, drafter in self.drafters.items():
            if name == self.model:
                continue
            proposals[name] = drafter.propose_tokens(context, cap)
            survival = counterfactual_survival(
                trace,
                name,
                len(proposals[name]),
                self.prior_alpha,
                self.prior_weight,
                self.copy_memory,
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


def counterfactual_survival(
    trace: Trace,
    name: str,
    depth: int,
    prior_alpha: float,
    prior_weight: float,
    last_steps: int,
) -> list[float]:
    """S(1), ..., S(``depth``): for deterministic drafter ``name``, the estimated chance that the
    first i tokens of a proposal are all accepted, from what it proposed at each of the last
    ``last_steps`` steps against the tokens emitted since.

    S(i) = a * b ** (i - 1): a is the chance that a proposal's first token is right, b that a
    token is right after the ones before it were. Two rates, not one, because copies are right
    for long stretches or wrong from the first token (one rate pooled over depths, lifted by a
    few long copies, would overrate every other proposal's first token); not a free rate per
    depth, because a few plain passes only show how the first few tokens of each proposal fared
    (a rate per depth knows nothing beyond them, and long drafts would never be tried).

    A step's proposal whose first m tokens match what was emitted from the step's start holds a
    right first token if m >= 1 (a wrong one if m = 0 and that token is known), then m - 1 right
    continuations and one wrong if the token after the m is known and differs. Each emitted
    token counts once as a continuation, for the first proposal in the window that reached it:
    consecutive proposals during a copy are the same text shifted by a token, and counting
    their overlap again and again made eight plain passes through one copy outweigh every miss
    of the drafts that followed. Tokens not yet emitted are not counted. a and b are Beta
    posterior means with prior mean ``prior_alpha`` and weight ``prior_weight``. When the
    drafter was used, each step's outcome is exactly its verification outcome.
    """
    if depth == 0:
        return []  # nothing proposed now: no need to read the window (the planner asks every step)
    first = first_known = later = later_known = 0
    judged = -1  # the last emitted position counted as a continuation
    for i in range(max(0, trace.target_passes - last_steps), trace.target_passes):
        proposal = trace.proposals[i].get(name, ())
        start = trace.starts[i]
        emitted = trace.tokens[start : start + len(proposal)]
        matched = leading_matches(proposal, emitted)
        missed = matched < len(emitted)  # the token after the matches is known and differs
        if matched:
            first += 1
            first_known += 1
            # continuations: positions start+1 .. start+matched-1 right, start+matched wrong
            begin = max(start + 1, judged + 1)
            last_right, last_known = start + matched - 1, start + matched - 1 + missed
            later += max(0, last_right - begin + 1)
            later_known += max(0, last_known - begin + 1)
            judged = max(judged, last_known)
        elif missed:
            first_known += 1
    prior = prior_alpha * prior_weight
    a = (first + prior) / (first_known + prior_weight)
    b = (later + prior) / (later_known + prior_weight)
    return [a * b**i for i in range(depth)]


def auto_planner(
    costs: CostCurve,
    vocab_size: int,
    model_drafter: Drafter | None = None,
    k_max: int = 16,
    history: SuffixHistory | None = None,
) -> AutoPlanner:
    """The default auto planner: prompt lookup of short and of long matches, the suffix drafter
    (reading ``history``, the earlier requests' sequences, when given), plus ``model_drafter``
    (named "draft") when given, drafting at most ``k_max`` tokens a step.

    Lookup and suffix match at least 2 tokens: a one-token match is right too rarely to pay (see
    :class:`~spec_decode.drafting.suffix.SuffixDrafter`). "long_lookup" proposes only after a
    match of :data:`LONG_MATCH` tokens and is judged on its own record: where the output is
    re-emitting text verbatim (an edit returning the whole code), a long match continues right
    far more often than the short matches whose mixed record the planner would otherwise
    apply, so the copy resumes as soon as the output rejoins the text after a change. All
    propose no further than the longest pass ``costs`` measured: beyond it the cost is
    extrapolated, not known."""
    longest = max(1, min(k_max, costs.sizes[-1] - 1))
    drafters: dict[str, Drafter] = {
        "lookup": PromptLookupDrafter(vocab_size, min_ngram=2, max_tokens=longest),
        "suffix": SuffixDrafter(
            vocab_size, max_match=8, max_tokens=longest, min_match=2, history=history
        ),
        "long_lookup": PromptLookupDrafter(
            vocab_size, min_ngram=LONG_MATCH, max_ngram=LONG_MATCH, max_tokens=longest
        ),
    }
    if model_drafter is not None:
        drafters["draft"] = model_drafter
    return AutoPlanner(costs, drafters, None if model_drafter is None else "draft", k_max)
