"""The model interface and deterministic toy models.

A model is anything with a ``vocab_size`` and ``next_dist(prefix)``, the probability vector of the
token after ``prefix``. Target models may also offer ``score(prefix, tokens)``, which scores a whole
drafted block in one forward pass; :func:`score` falls back to calling ``next_dist`` row by row so
toy models need not write it. Either way the sampler counts one :func:`score` call as ONE target
pass. Greedy decoding needs only each row's most likely token: :func:`greedy_tokens` asks a model
that offers ``top_tokens(prefix, tokens)`` for those alone (no probabilities computed), and
takes the argmax of :func:`score`'s rows otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from spec_decode.core.distributions import check_distributions


@runtime_checkable
class Model(Protocol):
    """A next-token distribution over a fixed vocabulary."""

    vocab_size: int

    def next_dist(self, prefix: Sequence[int]) -> np.ndarray:
        """Probability vector, shape (vocab_size,), of the token following ``prefix``."""
        ...


def score(model: Model, prefix: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
    """Distributions after ``prefix + tokens[:i]`` for i = 0..len(tokens): shape (len(tokens)+1, V).

    Uses the model's own ``score`` (one forward pass over the block) when it has one.
    """
    block_scorer = getattr(model, "score", None)
    if block_scorer is not None:
        return np.asarray(block_scorer(prefix, tokens), dtype=np.float64)
    context = list(prefix)
    rows = []
    for token in tokens:
        rows.append(model.next_dist(context))
        context.append(token)
    rows.append(model.next_dist(context))
    return np.stack(rows).astype(np.float64, copy=False)


def greedy_tokens(model: Model, prefix: Sequence[int], tokens: Sequence[int]) -> list[int]:
    """The most likely token after ``prefix + tokens[:i]`` for i = 0..len(tokens), the lowest id
    among ties: what greedy decoding emits at each of :func:`score`'s rows, in one pass.

    Every greedy path (target-only and speculative) reads its tokens here, so they agree by
    construction. A model's own ``top_tokens`` must return the argmax of the rows its ``score``
    would return; it exists to skip computing them (a softmax over the vocabulary per row).
    """
    top_tokens = getattr(model, "top_tokens", None)
    if top_tokens is not None:
        top = [int(t) for t in top_tokens(prefix, tokens)]
    else:
        rows = check_distributions(score(model, prefix, tokens), model.vocab_size, "target score")
        top = np.argmax(rows, axis=-1).tolist()
    if len(top) != len(tokens) + 1 or not all(0 <= t < model.vocab_size for t in top):
        raise ValueError(
            f"the target's top tokens {top[:8]} are not {len(tokens) + 1} ids in "
            f"[0, {model.vocab_size})"
        )
    return top


@dataclass(frozen=True, eq=False)
class MarkovModel:
    """An order-``m`` Markov model: the next token depends on the last ``m`` tokens only.

    ``table`` has shape (V,) * m + (V,): ``table[c1, ..., cm]`` is the distribution after the
    context (c1, ..., cm), oldest token first.
    """

    table: np.ndarray

    @property
    def vocab_size(self) -> int:
        return self.table.shape[-1]

    @property
    def order(self) -> int:
        return self.table.ndim - 1

    @property
    def rows(self) -> np.ndarray:
        """All next-token distributions, shape (V**order, V), contexts in base-V order."""
        return self.table.reshape(-1, self.vocab_size)

    def next_dist(self, prefix: Sequence[int]) -> np.ndarray:
        if len(prefix) < self.order:
            raise ValueError(
                f"an order-{self.order} Markov model needs a prefix of at least {self.order} "
                f"token(s), got {len(prefix)}"
            )
        return self.table[tuple(prefix[len(prefix) - self.order :])]


def random_markov(
    vocab_size: int, seed: int, order: int = 1, concentration: float = 0.5
) -> MarkovModel:
    """A random order-``order`` Markov model: each context's row is Dirichlet(concentration).

    Small ``concentration`` gives peaked rows (a confident model), large gives nearly flat ones.
    The same arguments always give the same model.
    """
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be >= 2, got {vocab_size}")
    if order < 1:
        raise ValueError(f"order must be >= 1, got {order}")
    if not concentration > 0:
        raise ValueError(f"concentration must be > 0, got {concentration}")
    rng = np.random.default_rng(seed)
    rows = rng.dirichlet(np.full(vocab_size, concentration), size=vocab_size**order)
    return MarkovModel(rows.reshape((vocab_size,) * order + (vocab_size,)))


def draft_from_target(
    target: MarkovModel, agreement: float, seed: int, concentration: float = 0.5
) -> MarkovModel:
    """A draft that mixes the target with an unrelated model: q = a * p + (1 - a) * r.

    ``r`` is an independent ``random_markov`` model of the same vocabulary and order, so
    ``agreement`` a = 1 gives the target itself and a = 0 an unrelated model. Since
    min(p, a p + (1 - a) r) = a p + (1 - a) min(p, r), the acceptance probability in each context
    is exactly ``a + (1 - a) * sum(min(p, r))``: never below ``a``, and above it by the chance
    overlap of the two models. :func:`spec_decode.theory.standard.markov_expectation` computes its
    long-run value exactly.
    """
    if not 0 <= agreement <= 1:
        raise ValueError(f"agreement must lie in [0, 1], got {agreement}")
    unrelated = random_markov(target.vocab_size, seed, target.order, concentration)
    return MarkovModel(agreement * target.table + (1 - agreement) * unrelated.table)
