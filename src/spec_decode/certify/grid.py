"""The search grids the certificates run on: model-pair families, sampling controls, and the
cases of the exhaustive certificate and of the auditor.

Pair families are chosen to expose bugs: peaked, flat and sparse rows, disjoint supports, a draft
that is zero where the target is not, near ties.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from spec_decode.core.models import MarkovModel, draft_from_target, random_markov
from spec_decode.core.randomness import fold_seed
from spec_decode.core.sampling import SamplingParams

#: The sampling controls every grid rotates through: plain, warped (temperature and top-k,
#: top-p) and greedy.
CONTROLS = (
    SamplingParams(),
    SamplingParams(temperature=0.7, top_k=2),
    SamplingParams(top_p=0.8),
    SamplingParams(temperature=0),
)


@dataclass(frozen=True)
class ExhaustiveCase:
    """One configuration of the generator certificate: a random Markov pair and its settings."""

    vocab: int
    k: int
    order: int
    n_tokens: int
    sampling: SamplingParams = field(default_factory=SamplingParams)

    @property
    def prefix(self) -> list[int]:
        return [0] * self.order

    def models(self, seed: int = 0) -> tuple[MarkovModel, MarkovModel]:
        """The target and a draft that agrees with it half the time."""
        target = random_markov(self.vocab, seed + 10 * self.vocab + self.order, self.order)
        return target, draft_from_target(target, 0.5, seed + 1)


#: What plain ``spec-decode verify`` enumerates: each control, orders 1 and 2 (seconds).
DEFAULT_CASES = tuple(
    ExhaustiveCase(vocab, k, order, n_tokens, CONTROLS[control])
    for vocab, k, order, n_tokens, control in (
        (3, 2, 1, 4, 0),
        (3, 2, 2, 4, 1),
        (4, 3, 1, 3, 2),
        (4, 2, 2, 4, 3),
        (2, 3, 2, 4, 0),
        (4, 2, 1, 4, 0),
    )
)

#: What ``spec-decode verify --exhaustive`` enumerates: vocabularies 2-4, k = 1-3, orders 1-2,
#: every control, four tokens (three for the costliest vocabulary-4 warped cases); then deep and
#: wide cases: k = 4, 5 and 8 on V = 2 (k + 1 tokens, so the first step drafts all k) and
#: vocabularies 5 and 6, each kept to a few seconds and a few thousand paths.
FULL_CASES = (
    *(
        ExhaustiveCase(
            vocab, k, order, 3 if vocab == 4 and sampling != CONTROLS[0] else 4, sampling
        )
        for vocab, k, order, sampling in itertools.product((2, 3, 4), (1, 2, 3), (1, 2), CONTROLS)
    ),
    *(
        ExhaustiveCase(vocab, k, order, n_tokens, CONTROLS[control])
        for vocab, k, order, n_tokens, control in (
            (2, 4, 1, 5, 0),
            (2, 5, 1, 6, 2),
            (2, 8, 1, 9, 3),
            (5, 1, 1, 3, 0),
            (5, 2, 1, 3, 3),
            (6, 1, 1, 3, 1),
            (6, 2, 1, 3, 2),
        )
    ),
)


@dataclass(frozen=True)
class AuditCase:
    """One model pair and setting of the search grid."""

    kind: str
    vocab: int
    k: int
    sampling: SamplingParams
    seed: int

    @property
    def n_tokens(self) -> int:
        """Enough tokens for the first step to draft all k tokens, and a second step after it."""
        return max(4 if self.vocab <= 3 else 3, self.k + 1)

    @property
    def name(self) -> str:
        return f"{self.kind}, V={self.vocab}, k={self.k}, {describe(self.sampling)}"

    def models(self) -> tuple[MarkovModel, MarkovModel]:
        return PAIR_FAMILIES[self.kind](np.random.default_rng(self.seed), self.vocab)


def _rows(rng: np.random.Generator, vocab: int, concentration: float) -> np.ndarray:
    return rng.dirichlet(np.full(vocab, concentration), size=vocab)


def _masked(rows: np.ndarray, keep: np.ndarray) -> np.ndarray:
    keep = keep.copy()
    keep[np.arange(len(keep)), np.argmax(rows * keep + 1e-12 * keep, axis=1)] = True
    masked = rows * keep
    empty = masked.sum(axis=1) == 0
    masked[empty] = keep[empty]
    return masked / masked.sum(axis=1, keepdims=True)


def _disjoint_supports(rng: np.random.Generator, vocab: int) -> tuple[MarkovModel, MarkovModel]:
    in_target = np.array([rng.permutation(vocab) < max(1, vocab // 2) for _ in range(vocab)])
    target = _masked(_rows(rng, vocab, 1.0), in_target)
    draft = _masked(_rows(rng, vocab, 1.0), ~in_target)
    return MarkovModel(target), MarkovModel(draft)


def _near_ties(rng: np.random.Generator, vocab: int) -> tuple[MarkovModel, MarkovModel]:
    rows = _rows(rng, vocab, 1.0)
    top = np.argsort(-rows, axis=1)[:, :2]
    for row, (a, b) in zip(rows, top, strict=True):
        row[b] = row[a] * (1 - 1e-3)
    rows /= rows.sum(axis=1, keepdims=True)
    return MarkovModel(rows), MarkovModel(rows[:, rng.permutation(vocab)])


def _deterministic_draft(rng: np.random.Generator, vocab: int) -> tuple[MarkovModel, MarkovModel]:
    """A target with full rows and a draft that always proposes one token per context (honestly
    one-hot): drafting never branches, so a deep chain (k up to 8) stays cheap to enumerate while
    every acceptance, rejection and residual of the rule is still exercised."""
    draft = np.eye(vocab)[rng.integers(vocab, size=vocab)]
    return MarkovModel(_rows(rng, vocab, 1.0)), MarkovModel(draft)


PAIR_FAMILIES: dict[str, Callable[[np.random.Generator, int], tuple[MarkovModel, MarkovModel]]] = {
    "peaked": lambda rng, v: (
        lambda t: (MarkovModel(t), MarkovModel(0.5 * t + 0.5 * _rows(rng, v, 0.2)))
    )(_rows(rng, v, 0.2)),
    "flat": lambda rng, v: (MarkovModel(_rows(rng, v, 5.0)), MarkovModel(_rows(rng, v, 5.0))),
    "sparse": lambda rng, v: (
        MarkovModel(_masked(_rows(rng, v, 1.0), rng.random((v, v)) < 0.5)),
        MarkovModel(_masked(_rows(rng, v, 1.0), rng.random((v, v)) < 0.5)),
    ),
    "disjoint supports": _disjoint_supports,
    "draft zero where target positive": lambda rng, v: (
        lambda t: (MarkovModel(t), MarkovModel(_masked(t, rng.random((v, v)) < 0.5)))
    )(_rows(rng, v, 1.0)),
    "near ties": _near_ties,
    "deterministic draft": _deterministic_draft,
}

_SHAPES = ((2, 1), (3, 2), (4, 1), (3, 3), (2, 3), (4, 2))


#: Deep and wide cases (kind, vocabulary, k, control index): k up to 8 on V = 2, where the path
#: count allows it, and vocabularies 5 and 6. Each stays within the per-case budget of the auditor
#: (:data:`spec_decode.certify.report.CASE_PATHS` paths, :data:`~spec_decode.certify.report.
#: CASE_SECONDS` seconds); the CLI's ``--case`` picks any of them.
_DEEP_AND_WIDE = (
    ("peaked", 2, 4, 0),
    ("deterministic draft", 2, 4, 0),
    ("deterministic draft", 2, 6, 2),
    ("deterministic draft", 2, 8, 0),
    ("peaked", 2, 8, 3),
    ("flat", 5, 1, 0),
    ("sparse", 6, 1, 1),
    ("near ties", 6, 2, 3),
)


def audit_cases(seed: int = 0, vocab: int | None = None) -> list[AuditCase]:
    """The search grid: every pair kind plain and warped, rotating through shapes and controls,
    then the deep (k up to 8) and wide (V = 5, 6) cases.

    With ``vocab`` given (a drafter bound to its own vocabulary), every case uses it, and above
    V = 2 the deep cases stop at k = 4, where their path counts stay within the budget. Any
    integer ``seed`` is accepted (:func:`~spec_decode.core.randomness.fold_seed`), so a seed
    numpy would refuse is never mistaken for a fault of the audited code.
    """
    seed = fold_seed(seed)
    cases = []
    families = [kind for kind in PAIR_FAMILIES if kind != "deterministic draft"]
    for i, (kind, warped) in enumerate(itertools.product(families, (False, True))):
        size, k = _SHAPES[i % len(_SHAPES)]
        sampling = CONTROLS[1 + (i // 2) % (len(CONTROLS) - 1)] if warped else CONTROLS[0]
        cases.append(AuditCase(kind, vocab or size, k, sampling, seed + i))
    for i, (kind, size, k, control) in enumerate(_DEEP_AND_WIDE, start=len(cases)):
        k = min(k, 4) if vocab is not None and vocab > 2 else k
        cases.append(AuditCase(kind, vocab or size, k, CONTROLS[control], seed + i))
    return cases


def describe(sampling: SamplingParams) -> str:
    if sampling.greedy:
        return "greedy"
    if sampling.is_identity:
        return "plain"
    parts = [f"temperature {sampling.temperature:g}"] if sampling.temperature != 1 else []
    parts += [f"top-k {sampling.top_k}"] if sampling.top_k is not None else []
    parts += [f"top-p {sampling.top_p:g}"] if sampling.top_p < 1 else []
    parts += [f"min-p {sampling.min_p:g}"] if sampling.min_p > 0 else []
    return ", ".join(parts)


def pick_cases(picks: Sequence[str], seed: int = 0, vocab: int | None = None) -> list[AuditCase]:
    """The cases of :func:`audit_cases` named by index or by a piece of their name, in order and
    without repeats (the whole grid when ``picks`` is empty); a ValueError listing every case
    when a pick matches none."""
    grid = audit_cases(seed, vocab)
    if not picks:
        return grid
    chosen: list[AuditCase] = []
    for pick in picks:
        matches = (
            [grid[int(pick)]]
            if pick.isdigit() and int(pick) < len(grid)
            else [c for c in grid if pick.lower() in c.name.lower()]
        )
        if not matches:
            names = "; ".join(f"{i}: {c.name}" for i, c in enumerate(grid))
            raise ValueError(f"no case matches {pick!r}; the cases are {names}")
        chosen += [c for c in matches if c not in chosen]
    return chosen
