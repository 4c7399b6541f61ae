"""Certificates for tree speculation: the exhaustive and statistical checks, run on trees.

Both run the real :func:`~spec_decode.tree_speculative.generate_tree`: the exhaustive one under
:class:`~spec_decode.exhaustive.EnumeratingSource`, down every drafting and verification branch;
the statistical one through :func:`~spec_decode.statistical.statistical_certificate`, with the
tree's depth in the role of k (a tree step emits at most depth + 1 tokens).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spec_decode.exhaustive import EnumeratingSource, ExactComparison, compare_with_target
from spec_decode.models import Model
from spec_decode.sampling import SamplingParams
from spec_decode.statistical import StatisticalCertificate, statistical_certificate
from spec_decode.tree import TreeShape
from spec_decode.tree_drafters import TreeDrafter
from spec_decode.tree_rules import TreeRule, verify_tree
from spec_decode.tree_speculative import generate_tree


def exact_tree_distribution(
    target: Model,
    draft: Model | None,
    prefix: Sequence[int],
    n_tokens: int,
    widths: Sequence[int] | TreeShape,
    *,
    sampling: SamplingParams | None = None,
    replacement: bool = True,
    rule: TreeRule = verify_tree,
    drafter: TreeDrafter | None = None,
) -> ExactComparison:
    """Enumerate :func:`~spec_decode.tree_speculative.generate_tree` exhaustively.

    Returns the exact distribution of its first ``n_tokens`` emitted tokens beside the warped
    target's joint over the same tokens, and how many execution paths were run.
    """
    sampling = sampling or SamplingParams()

    def program(source: EnumeratingSource) -> list[int]:
        return generate_tree(
            target,
            draft,
            prefix,
            n_tokens,
            widths,
            source,
            sampling=sampling,
            replacement=replacement,
            rule=rule,
            drafter=drafter,
        ).tokens

    return compare_with_target(program, target, prefix, n_tokens, sampling)


def tree_statistical_certificate(
    target: Model,
    draft: Model | None,
    prefix: list[int],
    widths: Sequence[int] | TreeShape,
    runs: int,
    seed: int,
    *,
    sampling: SamplingParams | None = None,
    replacement: bool = True,
    rule: TreeRule = verify_tree,
    drafter: TreeDrafter | None = None,
    significance: float = 1e-3,
) -> StatisticalCertificate:
    """Sample depth + 3 tokens ``runs`` times from the tree generator and chi-square test the first
    token, tokens 1-2 and the two tokens after the first block against the target's."""
    shape = widths if isinstance(widths, TreeShape) else TreeShape(tuple(widths))

    def generate(rng: np.random.Generator, n_tokens: int) -> list[int]:
        return generate_tree(
            target,
            draft,
            prefix,
            n_tokens,
            shape,
            rng,
            sampling=sampling,
            replacement=replacement,
            rule=rule,
            drafter=drafter,
        ).tokens

    return statistical_certificate(
        target,
        draft,
        prefix,
        shape.depth,
        runs,
        seed,
        sampling=sampling,
        significance=significance,
        generate=generate,
    )
