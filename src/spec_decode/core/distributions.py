"""Validation of probability vectors: bad input gets a ValueError naming the problem."""

from __future__ import annotations

import numpy as np

#: How far a distribution's sum may stray from 1 before it is rejected as not normalised.
NORMALISATION_TOLERANCE = 1e-6


def check_distributions(
    dists: np.ndarray, vocab_size: int, name: str = "distribution"
) -> np.ndarray:
    """Return ``dists`` as float64 after checking each row is a distribution over ``vocab_size``.

    Accepts one vector of shape (V,) or a stack of shape (n, V). Raises ``ValueError`` for the
    wrong length, NaN or infinite entries, negative entries, or a sum further than
    :data:`NORMALISATION_TOLERANCE` from 1.
    """
    array = np.asarray(dists, dtype=np.float64)
    if array.ndim not in (1, 2) or array.shape[-1] != vocab_size:
        raise ValueError(
            f"{name} has shape {array.shape}; expected (..., {vocab_size}) for vocabulary "
            f"size {vocab_size}"
        )
    sums = array.sum(axis=-1)
    if array.min(initial=0.0) >= 0 and (np.abs(sums - 1.0) <= NORMALISATION_TOLERANCE).all():
        return array  # the common case, in two reductions; below, say what is wrong
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or infinite entries")
    if np.any(array < 0):
        raise ValueError(f"{name} contains negative entries (min {array.min():.3g})")
    worst = float(np.atleast_1d(sums)[np.argmax(np.abs(np.atleast_1d(sums) - 1.0))])
    raise ValueError(
        f"{name} is not normalised: sums to {worst:.9g} (tolerance {NORMALISATION_TOLERANCE:g})"
    )


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    """Total-variation distance 1/2 * sum |p - q| between two distributions."""
    return 0.5 * float(np.abs(np.asarray(p, float) - np.asarray(q, float)).sum())
