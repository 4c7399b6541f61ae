"""Exact output distribution of the *real* generator, by running it down every random branch.

:class:`EnumeratingSource` is a :class:`~spec_decode.randomness.RandomSource` that replays a
recorded sequence of choices and records the alternatives at each new choice point. Re-running the
unmodified code under it, odometer-style, visits every execution path exactly once together with
its exact probability; zero-probability branches are pruned and paths are merged by what they emit.
Nothing is re-derived: the distribution is the implementation's own.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from spec_decode.distributions import check_distributions
from spec_decode.drafters import Drafter
from spec_decode.models import Model, draft_from_target, random_markov
from spec_decode.policies import KPolicy
from spec_decode.proof import TV_TOLERANCE
from spec_decode.rules import Rule, exact_rule
from spec_decode.sampling import SamplingParams
from spec_decode.speculative import generate_speculative


class NotEnumerable(Exception):
    """The code drew a continuous ``uniform()``, whose branches cannot be enumerated."""


class EnumeratingSource:
    """Follows ``choices`` (option indices) at the first choice points, then option 0, recording
    how many options each point had and multiplying up the path's probability."""

    def __init__(self, choices: list[int]) -> None:
        self.choices = choices
        self.widths: list[int] = []
        self.probability = 1.0

    def _choose(self, options: list[tuple[object, float]]) -> object:
        depth = len(self.widths)
        if depth == len(self.choices):
            self.choices.append(0)
        self.widths.append(len(options))
        value, prob = options[self.choices[depth]]
        self.probability *= prob
        return value

    def bernoulli(self, prob: float) -> bool:
        prob = min(max(float(prob), 0.0), 1.0)
        return bool(self._choose([(o, w) for o, w in ((True, prob), (False, 1.0 - prob)) if w > 0]))

    def categorical(self, probs: np.ndarray) -> int:
        probs = np.asarray(probs, dtype=float)
        support = np.flatnonzero(probs > 0)
        if support.size == 0:
            raise ValueError("categorical: probabilities have no positive mass")
        weights = probs[support] / probs[support].sum()
        return int(self._choose(list(zip(support.tolist(), weights, strict=True))))

    def uniform(self) -> float:
        raise NotEnumerable(
            "the code calls uniform(); only bernoulli/categorical can be enumerated"
        )


@dataclass(frozen=True)
class Enumeration:
    """Exact distribution of a random program's output, with the cost of computing it."""

    distribution: dict[tuple[int, ...], float]
    paths: int

    @property
    def total_probability(self) -> float:
        return float(sum(self.distribution.values()))


def enumerate_outputs(
    program: Callable[[EnumeratingSource], Sequence[int]], max_paths: int = 5_000_000
) -> Enumeration:
    """Run ``program`` once per execution path; return its exact output distribution."""
    distribution: dict[tuple[int, ...], float] = {}
    choices: list[int] = []
    paths = 0
    while True:
        source = EnumeratingSource(choices)
        output = tuple(int(t) for t in program(source))
        distribution[output] = distribution.get(output, 0.0) + source.probability
        paths += 1
        if paths > max_paths:
            raise RuntimeError(f"more than {max_paths} execution paths; use a smaller case")
        # Odometer: advance the deepest choice point that still has an untried option.
        widths = source.widths
        depth = len(widths) - 1
        while depth >= 0 and choices[depth] + 1 >= widths[depth]:
            depth -= 1
        if depth < 0:
            return Enumeration(distribution, paths)
        del choices[depth + 1 :]
        choices[depth] += 1


def target_joint(
    next_dist: Callable[[list[int]], np.ndarray], vocab_size: int, prefix: Sequence[int], n: int
) -> np.ndarray:
    """The target's own joint distribution of its next ``n`` tokens, shape (V,) * n.

    ``next_dist`` must return already-warped distributions; the joint is the product of the
    next-token probabilities along each of the V**n sequences.
    """
    joint = np.zeros((vocab_size,) * n)
    for sequence in itertools.product(range(vocab_size), repeat=n):
        prob, context = 1.0, list(prefix)
        for token in sequence:
            prob *= check_distributions(next_dist(context), vocab_size)[token]
            if prob == 0:
                break
            context.append(token)
        joint[sequence] = prob
    return joint


def as_array(enumeration: Enumeration, vocab_size: int, n: int) -> np.ndarray:
    """An enumeration of n-token outputs as a dense array of shape (V,) * n."""
    joint = np.zeros((vocab_size,) * n)
    for sequence, prob in enumeration.distribution.items():
        joint[sequence] += prob
    return joint


@dataclass(frozen=True)
class ExactComparison:
    """The generator's exact n-token output distribution beside the target's own joint."""

    speculative: np.ndarray
    target: np.ndarray
    paths: int

    @property
    def tv(self) -> float:
        """Total-variation distance between the two joints: 0 up to rounding when exact."""
        return 0.5 * float(np.abs(self.speculative - self.target).sum())

    @property
    def total_probability(self) -> float:
        return float(self.speculative.sum())


def compare_with_target(
    program: Callable[[EnumeratingSource], Sequence[int]],
    target: Model,
    prefix: Sequence[int],
    n_tokens: int,
    sampling: SamplingParams,
) -> ExactComparison:
    """Enumerate ``program`` (which emits ``n_tokens`` after ``prefix``) and set its exact output
    distribution beside the warped target's own joint."""
    enumeration = enumerate_outputs(program)
    vocab = target.vocab_size
    reference = target_joint(lambda c: sampling.warp(target.next_dist(c)), vocab, prefix, n_tokens)
    return ExactComparison(as_array(enumeration, vocab, n_tokens), reference, enumeration.paths)


def exact_output_distribution(
    target: Model,
    draft: Model | None,
    prefix: Sequence[int],
    n_tokens: int,
    k: int | KPolicy,
    *,
    sampling: SamplingParams | None = None,
    rule: Rule = exact_rule,
    drafter: Drafter | None = None,
) -> ExactComparison:
    """Enumerate :func:`~spec_decode.speculative.generate_speculative` exhaustively.

    ``k`` is a fixed k or a :class:`~spec_decode.policies.KPolicy`; a policy must choose k from
    the trace alone (no clock, no hidden state), since every path re-runs the generator.

    Returns the exact distribution of its first ``n_tokens`` emitted tokens and the warped
    target's joint over the same tokens. Raises :class:`NotEnumerable` if the code under test
    draws ``uniform()``.
    """
    sampling = sampling or SamplingParams()

    def program(source: EnumeratingSource) -> list[int]:
        return generate_speculative(
            target,
            draft,
            prefix,
            n_tokens,
            k,
            source,
            sampling=sampling,
            rule=rule,
            drafter=drafter,
        ).tokens

    return compare_with_target(program, target, prefix, n_tokens, sampling)


@dataclass(frozen=True)
class ExhaustiveCase:
    """One configuration of the generator certificate: a random Markov pair and its settings."""

    vocab: int
    k: int
    order: int
    n_tokens: int
    sampling: SamplingParams = field(default_factory=SamplingParams)

    def run(self, seed: int = 0) -> ExactComparison:
        target = random_markov(self.vocab, seed + 10 * self.vocab + self.order, self.order)
        draft = draft_from_target(target, 0.5, seed + 1)
        return exact_output_distribution(
            target, draft, [0] * self.order, self.n_tokens, self.k, sampling=self.sampling
        )


_CONTROLS = (
    SamplingParams(),
    SamplingParams(temperature=0.7, top_k=2),
    SamplingParams(top_p=0.8),
    SamplingParams(temperature=0),
)

#: What plain ``spec-decode verify`` enumerates: each control, orders 1 and 2 (seconds).
DEFAULT_CASES = (
    ExhaustiveCase(3, 2, 1, 4, _CONTROLS[0]),
    ExhaustiveCase(3, 2, 2, 4, _CONTROLS[1]),
    ExhaustiveCase(4, 3, 1, 3, _CONTROLS[2]),
    ExhaustiveCase(4, 2, 2, 4, _CONTROLS[3]),
    ExhaustiveCase(2, 3, 2, 4, _CONTROLS[0]),
    ExhaustiveCase(4, 2, 1, 4, _CONTROLS[0]),
)

#: What ``spec-decode verify --exhaustive`` enumerates: vocabularies 2-4, k = 1-3, orders 1-2,
#: every control, four tokens (three for the costliest vocabulary-4 warped cases).
FULL_CASES = tuple(
    ExhaustiveCase(vocab, k, order, 3 if vocab == 4 and sampling != _CONTROLS[0] else 4, sampling)
    for vocab, k, order, sampling in itertools.product((2, 3, 4), (1, 2, 3), (1, 2), _CONTROLS)
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
        comparison = case.run(seed)
        paths += comparison.paths
        if comparison.tv >= worst:
            worst, worst_case = comparison.tv, case
        if on_progress is not None:
            on_progress()
    return ExhaustiveCertificate(worst, paths, len(cases), worst_case)
