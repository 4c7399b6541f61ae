"""Library arguments: sizes bounded, counts and token ids whole numbers, refused with a
ValueError that names the problem before any work starts."""

from __future__ import annotations

import numpy as np
import pytest

from spec_decode import generate_autoregressive, generate_speculative
from spec_decode.core.checks import MAX_TOKENS, check_count, check_n_tokens, whole_number


def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def test_too_many_tokens_is_refused_with_the_limit(pair32):
    target, draft = pair32
    with pytest.raises(ValueError, match="limit of 1,000,000"):
        generate_speculative(target, draft, [0], 10**12, 4, rng())
    with pytest.raises(ValueError, match="n_tokens"):
        generate_autoregressive(target, [0], MAX_TOKENS + 1, rng())


@pytest.mark.parametrize("n_tokens", [3.5, "3", None, True])
def test_a_token_count_that_is_not_a_whole_number_is_refused(pair32, n_tokens):
    target, draft = pair32
    with pytest.raises(ValueError, match="n_tokens must be a whole number"):
        generate_speculative(target, draft, [0], n_tokens, 4, rng())


def test_fractional_token_ids_are_refused_not_truncated(pair32):
    target, draft = pair32
    with pytest.raises(ValueError, match=r"prefix tokens must be a whole number, got 0\.5"):
        generate_speculative(target, draft, [0.5], 10, 4, rng())
    exact = generate_speculative(target, draft, [1.0], 10, 4, rng())
    assert exact.tokens == generate_speculative(target, draft, [1], 10, 4, rng()).tokens


def test_whole_numbers_of_every_integer_type_are_accepted():
    assert whole_number(np.int64(7), "x") == 7
    assert whole_number(7.0, "x") == 7
    assert check_n_tokens(np.uint8(3)) == 3
    assert check_count(5, "pairs", 1, 5) == 5
    with pytest.raises(ValueError, match="pairs must be >= 1, got 0"):
        check_count(0, "pairs", 1)
    with pytest.raises(ValueError, match="whole number"):
        whole_number(float("nan"), "x")
