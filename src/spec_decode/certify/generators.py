"""The generator under test, as one kind of callable for every certificate.

A :data:`Generate` is called with a random source (or a seeded numpy generator) and a token count
and returns the emitted tokens. The exhaustive and statistical certificates take one, so chains
and trees (and any third-party generator) share one implementation of each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from spec_decode.core.models import Model
from spec_decode.core.protocols import KPolicy
from spec_decode.core.randomness import RandomSource
from spec_decode.core.tree import TreeShape
from spec_decode.drafting.speculative import generate_speculative, generate_tree

#: (random source, number of tokens) -> the emitted tokens.
Generate = Callable[[np.random.Generator | RandomSource, int], Sequence[int]]


def chain_generator(
    target: Model, draft: Model | None, prefix: Sequence[int], k: int | KPolicy, **options: Any
) -> Generate:
    """:func:`~spec_decode.drafting.speculative.generate_speculative` with everything but the random
    source and the token count fixed; ``options`` are its keyword arguments."""
    return lambda rng, n: generate_speculative(target, draft, prefix, n, k, rng, **options).tokens


def tree_generator(
    target: Model,
    draft: Model | None,
    prefix: Sequence[int],
    widths: Sequence[int] | TreeShape,
    **options: Any,
) -> Generate:
    """:func:`~spec_decode.drafting.speculative.generate_tree` with everything but the random source
    and the token count fixed; ``options`` are its keyword arguments."""
    return lambda rng, n: generate_tree(target, draft, prefix, n, widths, rng, **options).tokens
