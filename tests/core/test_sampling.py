"""Sampling controls: what each warp keeps, and that bad settings are refused."""

from __future__ import annotations

import numpy as np
import pytest

from spec_decode import SamplingParams

P = np.array([0.1, 0.4, 0.4, 0.05, 0.05])


def test_identity_leaves_distribution_unchanged():
    assert np.allclose(SamplingParams().warp(P), P)


def test_greedy_picks_argmax_with_lowest_id_on_ties():
    assert np.array_equal(SamplingParams(temperature=0).warp(P), [0, 1, 0, 0, 0])


def test_temperature_sharpens_in_log_space():
    warped = SamplingParams(temperature=0.5).warp(P)
    assert np.allclose(warped, P**2 / (P**2).sum())
    logits = np.log(P) + 3.0
    assert np.allclose(SamplingParams(temperature=0.5).warp_logits(logits), warped)


def test_top_k_keeps_k_most_likely_lowest_id_first():
    assert np.flatnonzero(SamplingParams(top_k=1).warp(P)).tolist() == [1]
    assert np.flatnonzero(SamplingParams(top_k=3).warp(P)).tolist() == [0, 1, 2]


def test_top_p_keeps_smallest_set_reaching_mass():
    assert np.flatnonzero(SamplingParams(top_p=0.8).warp(P)).tolist() == [1, 2]
    assert np.flatnonzero(SamplingParams(top_p=0.85).warp(P)).tolist() == [0, 1, 2]


def test_min_p_drops_tokens_below_fraction_of_max():
    assert np.flatnonzero(SamplingParams(min_p=0.2).warp(P)).tolist() == [0, 1, 2]


def test_warp_rows_and_zero_entries():
    rows = np.array([P, [0.0, 0.0, 1.0, 0.0, 0.0]])
    warped = SamplingParams(temperature=0.7, top_k=2).warp(rows)
    assert warped.shape == rows.shape
    assert np.allclose(warped.sum(axis=1), 1)
    assert np.array_equal(warped[1], rows[1])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": -1},
        {"temperature": float("nan")},
        {"top_k": 0},
        {"top_p": 0},
        {"top_p": 1.5},
        {"min_p": -0.1},
    ],
)
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)
