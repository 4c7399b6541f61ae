"""The exhaustive certificate: the real generator's exact output distribution against the
target's, by enumerating every execution path (:mod:`spec_decode.certify.enumeration`).

:func:`exact_distribution` takes any :data:`~spec_decode.certify.generators.Generate`; the chain
and tree wrappers build one from the generators' own arguments. :func:`certify_exhaustive` runs
the grid of :mod:`spec_decode.certify.grid` and reports the worst case.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spec_decode.certify.enumeration import enumerate_outputs
from spec_decode.certify.generators import Generate, chain_generator, tree_generator
from spec_decode.certify.grid import DEFAULT_CASES, ExhaustiveCase
from spec_decode.certify.reference import TV_TOLERANCE, ExactComparison, warped_target_joint
from spec_decode.core.models import Model
from spec_decode.core.protocols import KPolicy
from spec_decode.core.sampling import SamplingParams
from spec_decode.core.tree import TreeShape


def exact_distribution(
    generate: Generate,
    target: Model,
    prefix: Sequence[int],
    n_tokens: int,
    sampling: SamplingParams | None = None,
    **limits: Any,
) -> ExactComparison:
    """Enumerate ``generate`` (emitting ``n_tokens`` after ``prefix``) down every random branch
    and set its exact output distribution beside the ``sampling``-warped target's own joint.
    ``limits`` (``reset``, ``max_paths``, ``max_seconds``, the tolerances) go to
    :func:`~spec_decode.certify.enumeration.enumerate_outputs`.

    Whatever the generator consults must decide only from the past (a k policy from the trace,
    not the clock), since every path re-runs it. Raises
    :class:`~spec_decode.certify.enumeration.NotEnumerable` if it uses a ``uniform()`` other than by
    comparing it with thresholds.
    """
    enumeration = enumerate_outputs(lambda source: generate(source, n_tokens), **limits)
    joint = np.zeros((target.vocab_size,) * n_tokens)
    for sequence, prob in enumeration.distribution.items():
        joint[sequence] += prob
    reference = warped_target_joint(target, sampling or SamplingParams(), prefix, n_tokens)
    return ExactComparison(joint, reference, enumeration.paths)


def exact_output_distribution(
    target: Model,
    draft: Model | None,
    prefix: Sequence[int],
    n_tokens: int,
    k: int | KPolicy,
    **options: Any,
) -> ExactComparison:
    """:func:`exact_distribution` of :func:`~spec_decode.drafting.speculative.generate_speculative`;
    ``options`` (``sampling``, ``rule``, ``drafter``) are passed to it."""
    generate = chain_generator(target, draft, prefix, k, **options)
    return exact_distribution(generate, target, prefix, n_tokens, options.get("sampling"))


def exact_tree_distribution(
    target: Model,
    draft: Model | None,
    prefix: Sequence[int],
    n_tokens: int,
    widths: Sequence[int] | TreeShape,
    **options: Any,
) -> ExactComparison:
    """:func:`exact_distribution` of :func:`~spec_decode.drafting.speculative.generate_tree`;
    ``options`` (``sampling``, ``replacement``, ``rule``, ``drafter``) are passed to it."""
    generate = tree_generator(target, draft, prefix, widths, **options)
    return exact_distribution(generate, target, prefix, n_tokens, options.get("sampling"))


def run_case(case: ExhaustiveCase, seed: int = 0) -> ExactComparison:
    """Enumerate the generator on one case of the grid."""
    target, draft = case.models(seed)
    return exact_output_distribution(
        target, draft, case.prefix, case.n_tokens, case.k, sampling=case.sampling
    )


@dataclass(frozen=True)
class ExhaustiveCertificate:
    """Worst TV between the generator's exact output and the target's, over several cases."""

    max_tv: float
    paths: int
    cases: int
    worst_case: ExhaustiveCase | None

    @property
    def passed(self) -> bool:
        return self.max_tv < TV_TOLERANCE


def certify_exhaustive(
    cases: Sequence[ExhaustiveCase] = DEFAULT_CASES,
    seed: int = 0,
    on_progress: Callable[[], None] | None = None,
) -> ExhaustiveCertificate:
    """Enumerate the real generator on each case; report the worst TV and the paths visited."""
    worst, worst_case, paths = 0.0, None, 0
    for case in cases:
        comparison = run_case(case, seed)
        paths += comparison.paths
        if comparison.tv >= worst:
            worst, worst_case = comparison.tv, case
        if on_progress is not None:
            on_progress()
    return ExhaustiveCertificate(worst, paths, len(cases), worst_case)
