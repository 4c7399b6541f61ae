"""The closed-form exactness identity, checked over many random (p, q) pairs.

The first token a step emits is decided at the first drafted position, so its distribution is

    induced(t) = q(t) min(1, p(t)/q(t)) + (1 - sum_s min(p(s), q(s))) * residual(p, q)(t)

and since q(t) min(1, p(t)/q(t)) = min(p(t), q(t)), induced = p whenever the rejection mass is
positive. Every emitted token (accepted, residual or bonus) is a first token relative to its own
prefix, so this identity is the whole proof; :mod:`spec_decode.certify.exhaustive` checks the code
itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from spec_decode.certify.reference import TV_TOLERANCE
from spec_decode.core.checks import check_count
from spec_decode.core.distributions import total_variation
from spec_decode.core.rules import residual
from spec_decode.core.sampling import SamplingParams

__all__ = [
    "TV_TOLERANCE",
    "ClosedFormCertificate",
    "certify_closed_form",
    "induced_from_dists",
    "random_pairs",
    "residual",
]


def induced_from_dists(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Distribution of the first token emitted by the exact rule when drafts come from ``q``."""
    p, q = np.asarray(p, float), np.asarray(q, float)
    accepted = np.minimum(p, q)  # = q(t) * min(1, p(t) / q(t)), and 0 where q(t) = 0
    return accepted + (1.0 - accepted.sum()) * residual(p, q)


def _dirichlet(rng: np.random.Generator, size: int, concentration: float) -> np.ndarray:
    return rng.dirichlet(np.full(size, concentration))


def _sparse(rng: np.random.Generator, size: int) -> np.ndarray:
    dist = _dirichlet(rng, size, 1.0) * (rng.random(size) < 0.5)
    if dist.sum() == 0:
        dist[rng.integers(size)] = 1.0
    return dist / dist.sum()


def _disjoint(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    in_p = rng.permutation(size) < max(1, size // 2)
    p = _dirichlet(rng, size, 1.0) * in_p
    q = _dirichlet(rng, size, 1.0) * ~in_p
    return p / p.sum(), q / q.sum()


def _q_misses_p(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    p = _dirichlet(rng, size, 1.0)
    q = p * (rng.random(size) < 0.5)
    if q.sum() == 0:
        q[np.argmax(p)] = 1.0
    return p, q / q.sum()


def _near_tie(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    p = _dirichlet(rng, size, 1.0)
    q = p * (1 + 1e-9 * rng.standard_normal(size))
    return p, q / q.sum()


def _warped(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    params = SamplingParams(
        temperature=float(rng.choice([0.0, 0.3, 0.7, 1.0, 1.5])),
        top_k=int(rng.integers(1, size + 1)) if rng.random() < 0.5 else None,
        top_p=float(rng.uniform(0.3, 1.0)) if rng.random() < 0.5 else 1.0,
        min_p=float(rng.uniform(0.0, 0.3)) if rng.random() < 0.5 else 0.0,
    )
    target_logits = 3 * rng.standard_normal(size)
    draft_logits = target_logits + rng.standard_normal(size)
    return params.warp_logits(target_logits), params.warp_logits(draft_logits)


#: Families of (p, q) pairs, each probing a different corner of the identity.
PAIR_FAMILIES: dict[str, Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]] = {
    "flat": lambda rng, n: (_dirichlet(rng, n, 1.0), _dirichlet(rng, n, 1.0)),
    "peaked": lambda rng, n: (_dirichlet(rng, n, 0.1), _dirichlet(rng, n, 0.1)),
    "sparse": lambda rng, n: (_sparse(rng, n), _sparse(rng, n)),
    "disjoint supports": _disjoint,
    "q zero where p positive": _q_misses_p,
    "p equals q": lambda rng, n: (lambda p: (p, p.copy()))(_dirichlet(rng, n, 0.5)),
    "one-hot q": lambda rng, n: (_dirichlet(rng, n, 0.5), np.eye(n)[rng.integers(n)]),
    "near tie": _near_tie,
    "warped (temperature, top-k, top-p, min-p, greedy)": _warped,
}

VOCAB_SIZES = (2, 3, 4, 7, 16, 100, 1000)


def random_pairs(n_pairs: int, seed: int) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    """``n_pairs`` seeded (family, p, q) triples, cycling through families and vocabulary sizes."""
    rng = np.random.default_rng(seed)
    families = list(PAIR_FAMILIES.items())
    for i in range(n_pairs):
        name, make = families[i % len(families)]
        size = VOCAB_SIZES[(i // len(families)) % len(VOCAB_SIZES)]
        p, q = make(rng, size)
        yield name, p, q


@dataclass(frozen=True)
class ClosedFormCertificate:
    """Worst total-variation distance between the induced distribution and the target."""

    max_tv: float
    pairs: int
    worst_family: str

    @property
    def passed(self) -> bool:
        return self.max_tv < TV_TOLERANCE


#: The most pairs one check draws: a few minutes of work, and a hundred times the default.
MAX_PAIRS = 1_000_000


def certify_closed_form(
    n_pairs: int = 10_000,
    seed: int = 0,
    induced: Callable[[np.ndarray, np.ndarray], np.ndarray] = induced_from_dists,
    on_progress: Callable[[], None] | None = None,
) -> ClosedFormCertificate:
    """Check ``induced(p, q) == p`` over ``n_pairs`` random pairs; report the worst TV.

    ``induced`` can be swapped for the closed form of another rule to show the check fails.
    ``n_pairs`` is a whole number in [1, :data:`MAX_PAIRS`] (a ValueError otherwise).
    """
    n_pairs = check_count(n_pairs, "n_pairs", 1, MAX_PAIRS)
    worst, worst_family = 0.0, ""
    for family, p, q in random_pairs(n_pairs, seed):
        tv = total_variation(induced(p, q), p)
        if tv >= worst:
            worst, worst_family = tv, family
        if on_progress is not None:
            on_progress()
    return ClosedFormCertificate(worst, n_pairs, worst_family)
