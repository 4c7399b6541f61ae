"""Adapters for feifeibear/LLMSpeculativeSampling ``sampling/speculative_sampling.py`` and
``sampling/utils.py`` (commit 02d664be4f39a93bfaf3e80f9cb4e58499b43310), rewritten as chain rules.

``rule`` is ``speculative_sampling_v2``'s verification without ``random_seed``: accept x when
``torch.rand(1) < min(1, p(x) / q(x))``; on rejection ``sample(max_fn(p - q))``; after a full
block ``sample(p[-1])``. Upstream's ``sample`` raises ``RuntimeError`` whenever it draws token 0
(``if idx_next.item() == 0: raise RuntimeError``), so ``rule_as_shipped`` keeps that line and
``rule`` leaves it out to judge the arithmetic alone.

``rule_with_seed`` models ``--seed``: ``sample(..., random_seed=s)`` calls
``torch.manual_seed(s)`` before every ``torch.multinomial``, so every residual and bonus draw of a
generation is the inverse-CDF image of the same first number of the seeded stream. Modelled: one
uniform per generation shared by all those draws (compared with the cumulative sums, as
multinomial's inverse CDF does). Not modelled: that the acceptance numbers after a reseed also
repeat from step to step.

    spec-decode audit examples.audits.llm_speculative_sampling:rule
    spec-decode audit examples.audits.llm_speculative_sampling:rule_as_shipped
    spec-decode audit examples.audits.llm_speculative_sampling:rule_with_seed
"""

from __future__ import annotations

import weakref

import numpy as np


def _max_fn(x: np.ndarray) -> np.ndarray:
    positive = np.where(x > 0, x, 0.0)
    return positive / positive.sum()


def _verify(p, q, draft_tokens, rng, sample) -> list[int]:
    emitted: list[int] = []
    for i, token in enumerate(draft_tokens):
        if rng.uniform() < min(1.0, p[i, token] / q[i, token]):
            emitted.append(int(token))
        else:
            emitted.append(sample(_max_fn(p[i] - q[i]), rng))
            return emitted
    emitted.append(sample(p[len(draft_tokens)], rng))
    return emitted


def rule(p: np.ndarray, q: np.ndarray, draft_tokens, rng) -> list[int]:
    """``speculative_sampling_v2``'s verification, ``sample`` without its token-0 check."""
    return _verify(p, q, draft_tokens, rng, lambda probs, rng: rng.categorical(probs))


def rule_as_shipped(p: np.ndarray, q: np.ndarray, draft_tokens, rng) -> list[int]:
    """The same with upstream's ``sample``, which raises on drawing token 0."""

    def sample(probs: np.ndarray, rng) -> int:
        token = rng.categorical(probs)
        if token == 0:
            raise RuntimeError
        return token

    return _verify(p, q, draft_tokens, rng, sample)


_SEEDED_DRAW: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def rule_with_seed(p: np.ndarray, q: np.ndarray, draft_tokens, rng) -> list[int]:
    """The verification with ``random_seed`` set: one uniform per generation for every draw."""

    def sample(probs: np.ndarray, rng) -> int:
        if rng not in _SEEDED_DRAW:
            _SEEDED_DRAW[rng] = rng.uniform()
        u = _SEEDED_DRAW[rng]
        cumulative = np.cumsum(probs) / probs.sum()
        for token, bound in enumerate(cumulative[:-1]):
            if probs[token] > 0 and u < bound:
                return token
        return int(np.flatnonzero(probs > 0)[-1])

    return _verify(p, q, draft_tokens, rng, sample)
