"""Rules written the way tensor engines write them: a uniform draw compared with p/q, and float32
arithmetic. The auditor enumerates these exactly (:mod:`spec_decode.certify.lazy_uniform`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from spec_decode.core.randomness import RandomSource
from spec_decode.core.rules import residual


def uniform_rule(
    p: np.ndarray, q: np.ndarray, draft_tokens: Sequence[int], rng: RandomSource
) -> list[int]:
    """The exact rule with a fresh uniform per draft, accepting when u * q(x) < p(x). EXACT.

    This is how engines write it (``torch.rand(k) * q < p``); the control shows that comparing
    uniforms is enumerated exactly, not judged by sampling.
    """
    return _accept_below_uniforms(p, q, draft_tokens, rng, rng.uniform)


def shared_uniform(
    p: np.ndarray, q: np.ndarray, draft_tokens: Sequence[int], rng: RandomSource
) -> list[int]:
    """One uniform for every acceptance in a step, as when the seed is reset before each draw
    (LLMSpeculativeSampling's ``--seed``: every acceptance test sees the same number).

    Each test alone accepts with the right probability, but the tests are perfectly correlated:
    after the first acceptance (u < r_1) later ones are too likely when r_2 >= r_1, so whole blocks
    are accepted or rejected together and the joint distribution of the block is wrong.
    """
    u = rng.uniform()
    return _accept_below_uniforms(p, q, draft_tokens, rng, lambda: u)


def _accept_below_uniforms(
    p: np.ndarray,
    q: np.ndarray,
    draft_tokens: Sequence[int],
    rng: RandomSource,
    next_uniform: Callable[[], float],
) -> list[int]:
    """The exact rule's walk, accepting draft i when ``next_uniform() * q(x_i) < p(x_i)``."""
    emitted: list[int] = []
    for position, token in enumerate(draft_tokens):
        if not next_uniform() * q[position, token] < p[position, token]:
            emitted.append(rng.categorical(residual(p[position], q[position])))
            return emitted
        emitted.append(int(token))
    emitted.append(rng.categorical(p[len(draft_tokens)]))
    return emitted


def float32_rule(
    p: np.ndarray, q: np.ndarray, draft_tokens: Sequence[int], rng: RandomSource
) -> list[int]:
    """The exact rule computed in float32, as GPU engines hold probabilities.

    Unbiased but rounded: its TV to the target is ~1e-8, above the default 1e-9 limit and well
    below ``--tolerance 1e-6``; the audit report's float32 rounding floor shows the same order.
    """
    p32, q32 = np.asarray(p, np.float32), np.asarray(q, np.float32)
    emitted: list[int] = []
    for position, token in enumerate(draft_tokens):
        if not rng.bernoulli(float(p32[position, token] / q32[position, token])):
            excess = np.maximum(p32[position] - q32[position], np.float32(0))
            emitted.append(
                rng.categorical(excess / excess.sum() if excess.sum() > 0 else p32[position])
            )
            return emitted
        emitted.append(int(token))
    emitted.append(rng.categorical(p32[len(draft_tokens)]))
    return emitted
