"""Adapter for romsto/Speculative-Decoding ``sampling/speculative_decoding.py``
(commit 0b1fa5210dd8f2b2ca0d130aaff35b9072219852): the verification part of
``speculative_decoding``, rewritten as a chain rule for the auditor.

Upstream draws ``r = torch.rand(gamma)`` up front and takes n = the first i with
``r[i] > p_i(x_i) / q_i(x_i)``. Its list comprehension evaluates every comparison; here the
search stops at the first rejection, which gives the same n (the later r[i] are independent and
unused) and keeps the enumeration within its budget (evaluating all of them took over 8,800
paths on one case and turned the audit statistical). It keeps the n drafts and samples one
more token: from ``max_fn(p[n] - q[n])`` after a rejection, from the target's row n when all
were kept. With ``skip_sample_adjustment=True`` the
adjustment is skipped and the token after a rejection comes from the target's row n itself.

    spec-decode audit examples.audits.romsto_speculative_decoding:rule
    spec-decode audit examples.audits.romsto_speculative_decoding:rule_skip_adjustment
"""

from __future__ import annotations

import numpy as np


def _max_fn(x: np.ndarray) -> np.ndarray:
    positive = np.where(x > 0, x, 0.0)
    return positive / positive.sum()


def _verify(p, q, draft_tokens, rng, adjust: bool) -> list[int]:
    gamma = len(draft_tokens)
    r = [rng.uniform() for _ in range(gamma)]
    ratios = [p[i, x] / q[i, x] for i, x in enumerate(draft_tokens)]
    n = next((i for i in range(gamma) if r[i] > ratios[i]), gamma)
    row = _max_fn(p[n] - q[n]) if n < gamma and adjust else p[n]
    return [*map(int, draft_tokens[:n]), rng.categorical(row)]


def rule(p: np.ndarray, q: np.ndarray, draft_tokens, rng) -> list[int]:
    """Upstream's default (``skip_sample_adjustment=False``)."""
    return _verify(p, q, list(draft_tokens), rng, adjust=True)


def rule_skip_adjustment(p: np.ndarray, q: np.ndarray, draft_tokens, rng) -> list[int]:
    """Upstream with ``skip_sample_adjustment=True``: resamples p after a rejection."""
    return _verify(p, q, list(draft_tokens), rng, adjust=False)
