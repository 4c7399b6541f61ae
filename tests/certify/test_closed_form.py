"""The closed-form identity: the exact rule's first emitted token is distributed as p."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from spec_decode.certify.closed_form import PAIR_FAMILIES, certify_closed_form, induced_from_dists
from spec_decode.certify.reference import TV_TOLERANCE
from spec_decode.core.rules import residual


def _distribution(size: int):
    weights = arrays(np.float64, size, elements=st.floats(0, 1e3, allow_subnormal=False))
    return weights.filter(lambda w: w.sum() > 1e-6).map(lambda w: w / w.sum())


@st.composite
def pairs(draw):
    size = draw(st.integers(2, 40))
    return draw(_distribution(size)), draw(_distribution(size))


@pytest.mark.slow
@settings(max_examples=2000, deadline=None)
@given(pairs())
def test_induced_equals_target_for_any_pair(pair):
    p, q = pair
    assert 0.5 * np.abs(induced_from_dists(p, q) - p).sum() < TV_TOLERANCE


def test_certificate_passes_over_ten_thousand_pairs():
    certificate = certify_closed_form(10_000, seed=0)
    assert certificate.pairs == 10_000
    assert certificate.passed, certificate


def test_certificate_fails_for_the_resample_from_p_bug():
    def broken_induced(p, q):
        accepted = np.minimum(p, q)
        return accepted + (1 - accepted.sum()) * p

    certificate = certify_closed_form(1000, seed=0, induced=broken_induced)
    assert not certificate.passed
    assert certificate.max_tv > 0.1


def test_every_family_is_drawn():
    from spec_decode.certify.closed_form import random_pairs

    assert {name for name, _, _ in random_pairs(len(PAIR_FAMILIES), 0)} == set(PAIR_FAMILIES)


def test_residual_edge_cases():
    p = np.array([0.5, 0.5, 0.0])
    assert np.allclose(residual(p, p), p)  # zero residual mass: rejection cannot happen
    assert np.allclose(residual(p, np.array([0.0, 0.0, 1.0])), p)  # disjoint supports
    assert np.allclose(residual(np.array([0.7, 0.3]), np.array([0.5, 0.5])), [1.0, 0.0])
