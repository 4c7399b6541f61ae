"""Step functions: one target pass each, for every way of proposing tokens (the loop that calls
them is :func:`spec_decode.core.generate.generate`).

* :func:`chain_step` drafts up to k tokens, scores the prefix plus all of them in one pass
  (:func:`~spec_decode.core.models.score`) and lets the chain rule decide what to emit;
  :func:`planned_step` is the same step with a :class:`~spec_decode.core.protocols.Planner`
  choosing the drafter as well as k (k = 0: a plain target pass);
* :func:`tree_step` drafts a token tree, scores every node in one pass
  (:func:`~spec_decode.core.tree.score_tree`) and lets the tree rule walk down it;
* :func:`greedy_step` is :func:`planned_step` under greedy controls and an exact rule: it reads
  only the target's top token at each row, since that is all those rules use;
* :func:`target_step` samples one token from the target (the reference distribution).

Acceptance is decided in the rules (:mod:`spec_decode.core.rules`,
:mod:`spec_decode.core.tree_rules`); randomness enters only through the
:class:`~spec_decode.core.randomness.RandomSource` handed to them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from spec_decode.core.checks import (
    check_drafted,
    check_proposal,
    check_scores,
    check_tree,
    check_verdict,
    leading_matches,
)
from spec_decode.core.coupled import is_coupled
from spec_decode.core.distributions import check_distributions
from spec_decode.core.models import Model, greedy_tokens, score
from spec_decode.core.near_ties import settle_rows
from spec_decode.core.noise import sample_row
from spec_decode.core.protocols import Drafter, KPolicy, Plan, Planner, TreeDrafter
from spec_decode.core.randomness import RandomSource
from spec_decode.core.rules import Rule
from spec_decode.core.sampling import SamplingParams
from spec_decode.core.trace import Step, Trace
from spec_decode.core.tree import TokenTree, TreeShape, score_tree
from spec_decode.core.tree_rules import TreeRule

#: One target pass: (context, tokens still wanted, trace so far, random source) -> the step.
StepFunction = Callable[[list[int], int, Trace, RandomSource], Step]


class HasVocabulary(Protocol):
    """Anything with a ``vocab_size``: a chain or a tree drafter."""

    vocab_size: int


def chain_step(
    target: Model, drafter: Drafter, policy: KPolicy, rule: Rule, sampling: SamplingParams
) -> StepFunction:
    """Draft k tokens (k >= 0 from ``policy``), score them in one target pass, verify with
    ``rule`` (see :func:`planned_step`)."""
    return planned_step(target, {ONLY: drafter}, PolicyPlanner(policy), rule, sampling)


#: The name :func:`chain_step` gives its single drafter.
ONLY = "drafter"


@dataclass(frozen=True)
class PolicyPlanner:
    """The planner of a single drafter: k from a :class:`~spec_decode.core.protocols.KPolicy`."""

    policy: KPolicy

    def plan(self, context: list[int], trace: Trace, k_max: int) -> Plan:
        k = self.policy.next_k(trace)
        if k < 0:
            raise ValueError(f"the k policy chose k = {k}; it must be >= 0")
        return Plan(ONLY, min(k, k_max))


def planned_step(
    target: Model,
    drafters: Mapping[str, Drafter],
    planner: Planner,
    rule: Rule,
    sampling: SamplingParams,
) -> StepFunction:
    """Ask the drafter ``planner`` names for its k tokens, score them in one target pass, verify.

    A step that drafts nothing (k = 0, or a drafter with nothing to propose) samples the target's
    warped row directly, one categorical draw, without calling ``rule``: that is target-only
    sampling itself. Otherwise ``rule`` decides what to emit. Which drafter and k were chosen
    depends only on the context and the trace, so the output is distributed as the target's
    whenever every drafter reports the q it drew from and the rule is exact.
    """
    vocab_size = _shared_vocabulary(target, *drafters.values())

    def step(context: list[int], remaining: int, trace: Trace, source: RandomSource) -> Step:
        name, k, proposals = _checked_plan(planner, drafters, context, trace, remaining)
        start = time.perf_counter()
        drafted, q = [], np.empty((0, vocab_size))
        if k:
            drafted, q = check_proposal(*drafters[name].propose(context, k, source), k, vocab_size)
        raw_p, draft_s, target_s = _timed_scores(target, context, drafted, start)
        if is_coupled(rule):  # every row, the k = 0 one too: it may follow block-scored tokens
            paths = [drafted[:i] for i in range(len(drafted) + 1)]
            raw_p, target_s = _settled(target, sampling, raw_p, source, context, paths, target_s)
        if not drafted:  # warp the one row only: half the cost of warping a (1, V) block
            token = sample_row(source, sampling, raw_p[0])
            return Step([token], target_seconds=target_s, proposals=proposals)
        verdict = check_verdict(
            rule(sampling.warp(raw_p), q, drafted, source),
            len(drafted),
            vocab_size,
            kept=lambda emitted: leading_matches(drafted, emitted),
        )
        return Step(
            verdict.emitted,
            drafted=len(drafted),
            accepted=verdict.accepted,
            draft_calls=len(drafted),  # a chain drafter spends one call per drafted token
            draft_seconds=draft_s,
            target_seconds=target_s,
            drafter=name,
            proposals=proposals,
        )

    return step


def greedy_step(target: Model, drafters: Mapping[str, Drafter], planner: Planner) -> StepFunction:
    """:func:`planned_step` under greedy controls and an exact rule, on top tokens alone.

    Greedy controls make every warped target row one-hot at its most likely token a. The exact
    rule then accepts a draft x with probability p(x)/q(x), 1 when x == a and 0 otherwise, and
    after a rejection samples normalize(max(p - q, 0)), whose whole mass is on a; the coupled
    rule's noise picks a from a one-hot row as well. Whatever q, both keep the drafts that equal
    the target's top tokens and emit the top token after them, drawing nothing that matters. So
    this step asks the target for its top tokens only
    (:func:`~spec_decode.core.models.greedy_tokens`, one pass, no probabilities) and takes a
    deterministic drafter's tokens from the plan instead of building its q rows. The output is
    greedy target-only decoding's whatever was drafted. A rule under audit must see the rows:
    it goes through :func:`planned_step`.
    """
    vocab_size = _shared_vocabulary(target, *drafters.values())

    def step(context: list[int], remaining: int, trace: Trace, source: RandomSource) -> Step:
        name, k, proposals = _checked_plan(planner, drafters, context, trace, remaining)
        start = time.perf_counter()
        drafted: list[int] = []
        if k and name in proposals:  # the planner's proposal is the drafter's, cut to k
            drafted = check_drafted(proposals[name][:k], k, vocab_size)
        elif k:
            drafted, _ = check_proposal(*drafters[name].propose(context, k, source), k, vocab_size)
        drafted_at = time.perf_counter()
        top = greedy_tokens(target, context, drafted)
        target_s = time.perf_counter() - drafted_at
        if not drafted:
            return Step(top, target_seconds=target_s, proposals=proposals)
        accepted = leading_matches(drafted, top)
        return Step(
            top[: accepted + 1],
            drafted=len(drafted),
            accepted=accepted,
            draft_calls=len(drafted),
            draft_seconds=drafted_at - start,
            target_seconds=target_s,
            drafter=name,
            proposals=proposals,
        )

    return step


def _checked_plan(
    planner: Planner,
    drafters: Mapping[str, Drafter],
    context: list[int],
    trace: Trace,
    remaining: int,
) -> Plan:
    """The planner's choice for a step that may emit ``remaining`` tokens, checked: k in
    [0, remaining - 1] (a step emits at most k + 1 tokens: no overshoot) and a known drafter."""
    k_max = remaining - 1
    plan = planner.plan(context, trace, k_max)
    if not 0 <= plan.k <= k_max:
        raise ValueError(f"the planner chose k = {plan.k}; it must lie in [0, {k_max}]")
    if plan.k and plan.drafter not in drafters:
        raise ValueError(f"the planner chose an unknown drafter {plan.drafter!r}")
    return plan


def tree_step(
    target: Model, drafter: TreeDrafter, shape: TreeShape, rule: TreeRule, sampling: SamplingParams
) -> StepFunction:
    """Draft a tree of ``shape`` (cut to the depth still needed), score it in one pass, verify."""
    vocab_size = _shared_vocabulary(target, drafter)

    def step(context: list[int], remaining: int, trace: Trace, source: RandomSource) -> Step:
        depth = min(shape.depth, remaining - 1)  # a step emits at most depth + 1 tokens
        start = time.perf_counter()
        if depth == 0:
            tree = TokenTree.empty(vocab_size)
        else:
            proposed = drafter.propose_tree(context, TreeShape(shape.widths[:depth]), source)
            tree = check_tree(proposed, depth, vocab_size)
        raw_p, draft_s, target_s = _timed_scores(target, context, tree, start)
        if is_coupled(rule):
            paths = [[], *(tree.path(i) for i in range(tree.size))]
            raw_p, target_s = _settled(target, sampling, raw_p, source, context, paths, target_s)
        verdict = check_verdict(
            rule(sampling.warp(raw_p), tree, source), tree.depth, vocab_size, kept=tree.kept
        )
        return Step(
            verdict.emitted,
            drafted=tree.size,
            accepted=verdict.accepted,
            draft_calls=tree.expansions,
            draft_seconds=draft_s,
            target_seconds=target_s,
        )

    return step


def _shared_vocabulary(target: Model, *drafters: HasVocabulary) -> int:
    """The target's vocabulary size, once every drafter is checked to propose in it."""
    for drafter in drafters:
        if drafter.vocab_size != target.vocab_size:
            raise ValueError(
                f"draft vocabulary ({drafter.vocab_size}) differs from the target's "
                f"({target.vocab_size})"
            )
    return target.vocab_size


def _timed_scores(
    target: Model, context: list[int], drafted: list[int] | TokenTree, drafting_started: float
) -> tuple[np.ndarray, float, float]:
    """The target's checked score rows for the drafted chain or tree in ONE pass, with the
    seconds spent drafting (since ``drafting_started``) and scoring."""
    drafted_at = time.perf_counter()
    if isinstance(drafted, TokenTree):
        rows, n_drafted = score_tree(target, context, drafted), drafted.size
    else:
        rows, n_drafted = score(target, context, drafted), len(drafted)
    raw_p = check_scores(rows, n_drafted, target.vocab_size)
    scored_at = time.perf_counter()
    return raw_p, drafted_at - drafting_started, scored_at - drafted_at


def _settled(
    target: Model,
    sampling: SamplingParams,
    raw_p: np.ndarray,
    source: RandomSource,
    context: list[int],
    paths: list[list[int]],
    target_s: float,
) -> tuple[np.ndarray, float]:
    """Under the coupled rule: the rows with every near-tied choice replaced by the row
    target-only decoding computes (:mod:`spec_decode.core.near_ties`), and the target seconds
    with that work added."""
    start = time.perf_counter()
    settled = settle_rows(target, sampling, raw_p, source, context, paths)
    return settled, target_s + time.perf_counter() - start


def target_step(target: Model, sampling: SamplingParams) -> StepFunction:
    """Sample one token from the target's next-token distribution: target-only decoding (with
    the position's noise when the source is positional: a function of the seed; under greedy
    controls the top token, read as :func:`greedy_step` reads it)."""

    def step(context: list[int], remaining: int, trace: Trace, source: RandomSource) -> Step:
        start = time.perf_counter()
        if sampling.greedy:  # the top token alone: the function every greedy step reads
            top = greedy_tokens(target, context, [])
            return Step(top, target_seconds=time.perf_counter() - start)
        raw_p = check_distributions(
            target.next_dist(context), target.vocab_size, "target distribution"
        )
        scored_at = time.perf_counter()
        token = sample_row(source, sampling, raw_p)
        return Step([token], target_seconds=scored_at - start)

    return step
