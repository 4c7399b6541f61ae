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


def sorted_warp(params: SamplingParams, row: np.ndarray) -> np.ndarray:
    """The warp as it was, by whole-vocabulary stable sorts: what ranking only the likeliest
    tokens must reproduce bit for bit."""
    row = row - row.max()
    row /= params.temperature
    np.exp(row, out=row)
    if params.top_k is not None and params.top_k < row.size:
        row[np.argsort(-row, kind="stable")[params.top_k :]] = 0.0
    if params.top_p < 1:
        by_rank = np.argsort(-row, kind="stable")
        mass = np.cumsum(row[by_rank]) / row.sum()
        row[by_rank[int(np.searchsorted(mass, params.top_p, side="left")) + 1 :]] = 0.0
    if params.min_p > 0:
        row[row < params.min_p * row.max()] = 0.0
    return row / row.sum()


def test_top_k_and_top_p_rank_only_what_they_need_with_the_same_bits():
    """Ties (rounded logits), -inf entries, vocabularies below and above the ranked prefix, and
    top-p masses that need more than it; each row's warp bitwise the full sort's."""
    rng = np.random.default_rng(0)
    for trial in range(600):
        size = int(rng.choice([5, 300, 3000, 151_936 if trial % 100 == 0 else 20_000]))
        logits = rng.standard_normal(size) * rng.choice([0.1, 1, 3, 10])
        if trial % 2:
            logits = np.round(logits, int(rng.integers(0, 2)))
        if trial % 5 == 0:
            logits[rng.integers(0, size, size // 3)] = -np.inf
        params = SamplingParams(
            float(rng.choice([0.3, 0.7, 1.5])),
            top_k=int(rng.choice([1, 3, 40, 1000, 10**6])) if trial % 3 == 0 else None,
            top_p=float(rng.choice([0.05, 0.5, 0.95, 0.999999, 1.0])),
            min_p=float(rng.choice([0.0, 0.05])),
        )
        warped = params.warp_logits(logits)
        assert np.array_equal(warped.view(np.uint64), sorted_warp(params, logits).view(np.uint64))


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
