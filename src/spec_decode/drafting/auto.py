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
option listed first, so with no evidence of gain the policy decodes plainly. On a server whose
requests share each call, the requests choose their blocks together, each offering its options
and solving the whole call (:mod:`spec_decode.drafting.shared_call`), and nothing is drafted
while one of them reads its prompt. Where a draft token costs a large fraction of a target token
and a 2-token pass far more than a 1-token one (a CPU), no acceptance rate makes the draft model
pay, and it is never chosen (:func:`draft_model_can_pay`).

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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from spec_decode.core.protocols import DeterministicDrafter, Drafter, Plan
from spec_decode.core.trace import Trace
from spec_decode.drafting.copy_survival import copy_survival
from spec_decode.drafting.costs import CostCurve
from spec_decode.drafting.lookup import PromptLookupDrafter
from spec_decode.drafting.policies import estimated_alpha, expected_tokens_per_pass
from spec_decode.drafting.shared_call import ALONE, Offer, Option, SharedCall, joint_plan
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
    share
        Posts this request's offer for the next call and returns every running request's
        (:class:`~spec_decode.drafting.shared_call.SharedCall`), asked before every step but the
        first (``None``: the request is alone). Under greedy controls or the coupled rule the
        output does not depend on the plan; a sampled request under the standard rule with a
        seed must plan alone, or its output would depend on its neighbours.
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
    share: Callable[[Offer], SharedCall] | None = None

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
        pass), with every deterministic drafter's proposal (at most ``k_max`` tokens); beside
        other requests, this request's part of the whole call's best plan
        (:mod:`spec_decode.drafting.shared_call`).

        The first step of a generation is a plain pass, planned without asking any drafter: it
        reads the prompt, and its token is the first to stream, as soon as target-only decoding
        would stream it (drafts scored in the same call would delay it by their cost, and so
        would a drafter indexing a long prompt before it). So is every step while another
        request reads its prompt."""
        cap = min(self.k_max, k_max)
        if cap == 0 or trace.target_passes == 0:
            return Plan("", 0)
        offer, proposals = self.offer(context, trace, cap)
        best = self.choose(offer, self.share(offer) if self.share is not None else ALONE)
        return Plan(best.drafter, best.rows - 1, proposals)

    def choose(self, offer: Offer, shared: SharedCall) -> Option:
        """The option of ``offer`` (this request's, in ``shared``) to feed the next call: the
        plain pass (its first option) while a request reads its prompt or when there is nothing
        to draft; alone, the best rate (ties to fewer rows); beside others, this request's part
        of the whole call's best plan."""
        if shared.reading_prompt or len(offer) == 1:
            return offer[0]
        if not shared.alone:
            picks = joint_plan(
                self.costs, shared.offers, shared.budget, shared.seqs, shared.one_pass
            )
            return offer[picks[shared.mine]]
        best = offer[0]  # ties go to the option with fewer rows
        for option in offer[1:]:
            if option.rate(self.costs.target) > best.rate(self.costs.target):
                best = option
        return best

    def offer(
        self, context: list[int], trace: Trace, cap: int
    ) -> tuple[Offer, dict[str, list[int]]]:
        """This step's options, the best (alone) for each number of rows, fewest rows first,
        and every deterministic drafter's proposal of at most ``cap`` tokens: a plain pass,
        worth ``1 + margin`` tokens so that drafting must beat it by the margin, every prefix
        of every proposal, and the draft model's k = 1..``cap``, whose drafting includes
        reading what of ``context`` it has not read yet (:meth:`_reading_seconds`)."""
        proposals = {
            name: drafter.propose_tokens(context, cap)
            for name, drafter in self.drafters.items()
            if name != self.model
        }
        options = [Option(1, 1.0 + self.margin)]
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
                options.append(Option(j + 1, expected, 0.0, name))
        if self.model is not None:
            alpha = estimated_alpha(
                trace, self.prior_alpha, self.prior_weight, self.model, self.memory
            )
            draft = self.costs.draft_seconds or 0.0
            unread = getattr(self.drafters[self.model], "unread", None)
            reading = self._reading_seconds(unread(context)) if unread is not None else 0.0
            for k in range(1, cap + 1):
                expected = expected_tokens_per_pass(alpha, k)
                options.append(Option(k + 1, expected, reading + k * draft, self.model))
        best: dict[int, Option] = {}
        for option in options:  # the first of equally good options stays
            kept = best.get(option.rows)
            if kept is None or option.rate(self.costs.target) > kept.rate(self.costs.target):
                best[option.rows] = option
        return tuple(best[rows] for rows in sorted(best)), proposals

    def _reading_seconds(self, tokens: int) -> float:
        """Seconds the draft model takes to read ``tokens`` tokens (a prompt it has not seen, the
        tokens emitted since it last drafted): its one-token pass scaled as the target's longest
        measured block is to the target's one-token pass, a block's tokens costing far less
        each than one-token passes (a draft read only when first chosen must not look free)."""
        if tokens <= 0:
            return 0.0
        longest = self.costs.sizes[-1]
        per_token = self.costs.target(longest) / (longest * self.costs.target(1))
        return tokens * per_token * (self.costs.draft_seconds or 0.0)


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
    share: Callable[[Offer], SharedCall] | None = None,
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
    a new one; ``share`` trades offers with the requests sharing its calls
    (:class:`AutoPlanner`)."""
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
        share=share,
    )
