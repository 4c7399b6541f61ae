"""Toy-model experiments behind ``spec-decode run`` (chains and trees), ``sweep`` and the bench
scripts.

Each experiment generates text with a random Markov target and a draft of given agreement, and
puts the measured figures next to the exact expectation of
:func:`spec_decode.theory.standard.markov_expectation` (chains) or
:func:`spec_decode.theory.standard.tree_markov_expectation` (trees, also beside the chain that
drafts as many tokens per step).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from spec_decode.core.models import MarkovModel, draft_from_target, random_markov
from spec_decode.core.sampling import SamplingParams
from spec_decode.core.tree import TreeShape
from spec_decode.drafting.policies import expected_tokens_per_pass, policy_by_name
from spec_decode.drafting.rule_choice import rule_by_name
from spec_decode.drafting.speculative import generate_speculative, generate_tree
from spec_decode.theory.coupled import coupled_markov_expectation
from spec_decode.theory.standard import markov_expectation, tree_markov_expectation


@dataclass(frozen=True)
class ToySetup:
    """The toy target/draft pair: a random Markov target and a draft mixed from it."""

    vocab_size: int = 32
    order: int = 1
    concentration: float = 0.5
    seed: int = 0

    def __post_init__(self) -> None:
        if self.vocab_size < 2:
            raise ValueError(f"vocab_size must be >= 2, got {self.vocab_size}")

    def models(self, agreement: float) -> tuple[MarkovModel, MarkovModel]:
        """The target and a draft of the given ``agreement`` (see ``draft_from_target``)."""
        target = random_markov(self.vocab_size, self.seed, self.order, self.concentration)
        return target, draft_from_target(target, agreement, self.seed + 1, self.concentration)


@dataclass(frozen=True)
class RunResult:
    """Measured figures of one run beside the exact Markov expectation and the i.i.d. formula.

    The expected figures are those of drafting a fixed ``k`` with no cut-off; for an adaptive
    ``policy`` or a ``min_confidence`` cut-off they are the fixed-k baseline the run is set against.
    """

    tokens: int
    k: int
    policy: str
    min_confidence: float
    agreement: float
    alpha: float
    target_passes: int
    draft_calls: int
    acceptance_rate: float
    expected_acceptance_rate: float
    tokens_per_pass: float
    expected_tokens_per_pass: float
    iid_tokens_per_pass: float
    draft_cost: float
    speedup: float
    expected_speedup: float
    acceptance_histogram: list[int]
    rule: str = "standard"

    def to_dict(self) -> dict:
        return asdict(self)


def run_experiment(
    setup: ToySetup,
    agreement: float,
    k: int,
    n_tokens: int,
    draft_cost: float,
    seed: int,
    sampling: SamplingParams | None = None,
    *,
    policy: str = "fixed",
    k_max: int = 16,
    min_confidence: float = 0.0,
    on_tokens: Callable[[list[int]], None] | None = None,
    rule: str = "standard",
) -> RunResult:
    """Generate ``n_tokens`` speculatively and compare with the exact expectation.

    ``policy`` names how k is chosen (:func:`spec_decode.drafting.policies.policy_by_name`: ``k`` is
    the fixed or starting k, ``k_max`` caps adaptive policies, and the cost policy uses
    ``draft_cost`` as its cost ratio); ``min_confidence`` is the draft's confidence cut-off;
    ``on_tokens`` is called with each step's tokens (for progress); ``rule`` names the rule
    (:data:`~spec_decode.drafting.rule_choice.RULE_NAMES`; the coupled rule's expectation is
    :func:`~spec_decode.theory.coupled.coupled_markov_expectation`, race noise).
    """
    choice = rule_by_name(rule)
    if n_tokens < 1:
        raise ValueError(f"tokens must be >= 1, got {n_tokens}")
    if draft_cost < 0:
        raise ValueError(f"draft cost must be >= 0, got {draft_cost}")
    target, draft = setup.models(agreement)
    trace = generate_speculative(
        target,
        draft,
        [0] * target.order,
        n_tokens,
        policy_by_name(policy, k, k_max, draft_cost),
        np.random.default_rng(seed),
        sampling=sampling,
        rule=choice.chain,
        drafter=choice.model_drafter(draft, sampling or SamplingParams(), min_confidence),
        on_tokens=on_tokens,
    )
    theory = coupled_markov_expectation if choice.coupled else markov_expectation
    expectation = theory(target, draft, k, sampling)
    return RunResult(
        tokens=len(trace.tokens),
        k=k,
        policy=policy,
        min_confidence=min_confidence,
        agreement=agreement,
        alpha=expectation.alpha,
        target_passes=trace.target_passes,
        draft_calls=trace.draft_calls,
        acceptance_rate=trace.acceptance_rate,
        expected_acceptance_rate=expectation.acceptance_rate,
        tokens_per_pass=trace.tokens_per_pass,
        expected_tokens_per_pass=expectation.tokens_per_pass,
        iid_tokens_per_pass=expected_tokens_per_pass(expectation.alpha, k),
        draft_cost=draft_cost,
        speedup=trace.speedup(draft_cost),
        expected_speedup=expectation.speedup(draft_cost),
        acceptance_histogram=trace.acceptance_histogram.tolist(),
        rule=rule,
    )


DEFAULT_AGREEMENTS = (0.0, 0.2, 0.4, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)


def sweep(
    setup: ToySetup,
    k_max: int,
    n_tokens: int,
    draft_cost: float,
    seed: int,
    agreements: Sequence[float] = DEFAULT_AGREEMENTS,
    on_progress: Callable[[], None] | None = None,
    rule: str = "standard",
) -> list[RunResult]:
    """:func:`run_experiment` for every agreement and every k in 1..k_max, with ``rule``."""
    if k_max < 1:
        raise ValueError(f"k must be >= 1, got {k_max}")
    results = []
    for agreement in agreements:
        for k in range(1, k_max + 1):
            results.append(
                run_experiment(setup, agreement, k, n_tokens, draft_cost, seed, rule=rule)
            )
            if on_progress is not None:
                on_progress()
    return results


@dataclass(frozen=True)
class TreeRunResult:
    """Measured figures of one tree run, the exact expectation, and the equal-size chain's.

    ``drafted_per_step`` and ``draft_calls_per_step`` are the full shape's nodes and expanded
    positions; ``chain_*`` figures are exact for a chain with k = ``drafted_per_step``; ``alpha``
    is the stationary acceptance probability of a single draft, as in ``RunResult``.
    """

    tokens: int
    widths: list[int]
    replacement: bool
    drafted_per_step: int
    draft_calls_per_step: int
    agreement: float
    alpha: float
    target_passes: int
    draft_calls: int
    accepted_per_pass: float
    expected_accepted_per_pass: float
    tokens_per_pass: float
    expected_tokens_per_pass: float
    chain_tokens_per_pass: float
    draft_cost: float
    speedup: float
    expected_speedup: float
    chain_expected_speedup: float
    acceptance_histogram: list[int]

    def to_dict(self) -> dict:
        return asdict(self)


def run_tree_experiment(
    setup: ToySetup,
    agreement: float,
    widths: Sequence[int] | TreeShape,
    n_tokens: int,
    draft_cost: float,
    seed: int,
    sampling: SamplingParams | None = None,
    replacement: bool = True,
    on_tokens: Callable[[list[int]], None] | None = None,
) -> TreeRunResult:
    """Generate ``n_tokens`` with a token tree; compare with the exact tree and chain figures.
    ``on_tokens`` is called with each step's tokens (for progress)."""
    if n_tokens < 1:
        raise ValueError(f"tokens must be >= 1, got {n_tokens}")
    if draft_cost < 0:
        raise ValueError(f"draft cost must be >= 0, got {draft_cost}")
    shape = widths if isinstance(widths, TreeShape) else TreeShape(tuple(widths))
    target, draft = setup.models(agreement)
    expectation = tree_markov_expectation(target, draft, shape, sampling, replacement)
    chain = markov_expectation(target, draft, shape.nodes, sampling)
    trace = generate_tree(
        target,
        draft,
        [0] * target.order,
        n_tokens,
        shape,
        np.random.default_rng(seed),
        sampling=sampling,
        replacement=replacement,
        on_tokens=on_tokens,
    )
    return TreeRunResult(
        tokens=len(trace.tokens),
        widths=list(shape.widths),
        replacement=replacement,
        drafted_per_step=shape.nodes,
        draft_calls_per_step=shape.expansions,
        agreement=agreement,
        alpha=chain.alpha,
        target_passes=trace.target_passes,
        draft_calls=trace.draft_calls,
        accepted_per_pass=trace.accepted / trace.target_passes,
        expected_accepted_per_pass=expectation.accepted_per_pass,
        tokens_per_pass=trace.tokens_per_pass,
        expected_tokens_per_pass=expectation.tokens_per_pass,
        chain_tokens_per_pass=chain.tokens_per_pass,
        draft_cost=draft_cost,
        speedup=trace.speedup(draft_cost),
        expected_speedup=expectation.speedup(draft_cost),
        chain_expected_speedup=chain.speedup(draft_cost),
        acceptance_histogram=trace.acceptance_histogram.tolist(),
    )
