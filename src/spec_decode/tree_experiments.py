"""Toy-model tree experiments behind ``spec-decode run --tree`` and ``bench/tree.py``.

Each run generates with a token tree on the random Markov pair of
:class:`~spec_decode.experiments.ToySetup` and puts the measured figures beside the exact
expectation of :func:`~spec_decode.theory.tree_markov_expectation` and beside the chain that
drafts as many tokens per step (:func:`~spec_decode.theory.markov_expectation`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from spec_decode.experiments import ToySetup
from spec_decode.sampling import SamplingParams
from spec_decode.theory import markov_expectation, tree_markov_expectation
from spec_decode.tree import TreeShape
from spec_decode.tree_speculative import generate_tree


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
) -> TreeRunResult:
    """Generate ``n_tokens`` with a token tree; compare with the exact tree and chain figures."""
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
