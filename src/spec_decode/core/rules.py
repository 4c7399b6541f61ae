"""Verification rules: decide which drafted tokens to keep and what to emit after them.

A rule maps ``(p, q, draft_tokens, rng)`` to a :class:`Verdict`: the tokens it emits and how
many of them are accepted drafts. ``p`` has shape (k+1, V): the warped
target distributions at each drafted position plus the bonus position; ``q`` has shape (k, V): the
distributions the drafter says it sampled each token from. A rule emits between 1 and k+1 tokens
and draws randomness only through ``rng``, a :class:`~spec_decode.core.randomness.RandomSource`.
A rule may also return the emitted tokens alone, as third-party code under audit does; the loop
then counts the emitted prefix that equals the drafts as accepted
(:func:`~spec_decode.core.checks.check_verdict`), which overcounts when a residual draw happens
to equal the rejected draft (the exact rule's residual gives a rejected token probability 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from spec_decode.core.randomness import RandomSource


@dataclass(frozen=True)
class Verdict:
    """One step's decision: the ``emitted`` tokens, of which the first ``accepted`` are drafts
    the rule kept; the token after them (a residual, bonus or fallback draw) is not counted."""

    emitted: list[int]
    accepted: int


class Rule(Protocol):
    """The verification-rule interface."""

    def __call__(
        self, p: np.ndarray, q: np.ndarray, draft_tokens: Sequence[int], rng: RandomSource
    ) -> Verdict | list[int]: ...


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """normalize(max(p - q, 0)): what to sample from after rejecting a draft token.

    When the positive part has no mass (p <= q everywhere, so p == q), rejection has probability
    zero and can only be reached through rounding; ``p`` itself is returned then.
    """
    excess = np.maximum(np.asarray(p, float) - np.asarray(q, float), 0.0)
    mass = excess.sum()
    return excess / mass if mass > 0 else np.asarray(p, float)


def exact_rule(
    p: np.ndarray, q: np.ndarray, draft_tokens: Sequence[int], rng: RandomSource
) -> Verdict:
    """The exact rule of Leviathan et al. (2023) and Chen et al. (2023).

    Accept draft token x with probability min(1, p(x)/q(x)); at the first rejection emit a sample
    of :func:`residual` and stop; if all drafts are accepted, emit a bonus token from the last
    row of ``p``. Every emitted token is then distributed exactly as the target's.
    """
    emitted: list[int] = []
    for position, token in enumerate(draft_tokens):
        if not rng.bernoulli(p[position, token] / q[position, token]):
            return Verdict(
                [*emitted, rng.categorical(residual(p[position], q[position]))], position
            )
        emitted.append(int(token))
    return Verdict([*emitted, rng.categorical(p[len(draft_tokens)])], accepted=len(emitted))
