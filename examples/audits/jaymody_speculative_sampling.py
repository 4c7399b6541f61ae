"""Adapter for jaymody/speculative-sampling ``main.py``
(commit 03b4759da6e894bacdc2f396dc4fd88c913bf94d): the verification loop of
``speculative_sampling``, rewritten as a chain rule for the auditor.

Upstream names are swapped with respect to ours: its ``p`` is the draft's distribution and its
``q`` the target's. Its decisions, in our names: accept draft x with probability
min(1, p(x) / q(x)) using ``np.random.random()``; on rejection sample ``max_fn(target - draft)``
(the normalised positive part); after a full block sample the target's last row.

    spec-decode audit examples.audits.jaymody_speculative_sampling:rule
"""

from __future__ import annotations

import numpy as np


def _max_fn(x: np.ndarray) -> np.ndarray:
    positive = np.where(x > 0, x, 0)
    return positive / np.sum(positive)


def rule(p: np.ndarray, q: np.ndarray, draft_tokens, rng) -> list[int]:
    """Upstream's steps 3-4; ``np.random.random()`` becomes ``rng.uniform()`` (only compared)."""
    emitted: list[int] = []
    for i, token in enumerate(draft_tokens):
        if rng.uniform() < min(1.0, p[i, token] / q[i, token]):
            emitted.append(int(token))
        else:
            emitted.append(rng.categorical(_max_fn(p[i] - q[i])))
            return emitted
    emitted.append(rng.categorical(p[len(draft_tokens)]))
    return emitted
