"""Theory: the i.i.d. formulas and the exact Markov expectation against measurement."""

from __future__ import annotations

import numpy as np
import pytest

from spec_decode import draft_from_target, generate_speculative, random_markov
from spec_decode.drafting.policies import expected_speedup, expected_tokens_per_pass, optimal_k
from spec_decode.theory.standard import markov_expectation


def test_iid_formulas():
    assert expected_tokens_per_pass(0.0, 4) == 1.0
    assert expected_tokens_per_pass(1.0, 4) == 5.0
    assert expected_tokens_per_pass(0.5, 2) == pytest.approx(1.75)
    assert expected_speedup(0.5, 2, 0.25) == pytest.approx(1.75 / 1.5)


def test_optimal_k_grows_with_alpha_and_shrinks_with_cost():
    assert optimal_k(0.9, 0.05) > optimal_k(0.6, 0.05)
    assert optimal_k(0.8, 0.5) < optimal_k(0.8, 0.05)
    k = optimal_k(0.8, 0.1)
    assert expected_speedup(0.8, k, 0.1) >= max(expected_speedup(0.8, j, 0.1) for j in range(1, 30))


def test_markov_expectation_matches_iid_when_acceptance_is_constant():
    # The same row in every context: acceptance does not depend on the state.
    target = random_markov(6, seed=0)
    target.table[:] = target.table[0]
    draft = draft_from_target(target, 0.0, seed=1)
    draft.table[:] = draft.table[0]
    expectation = markov_expectation(target, draft, 3)
    assert expectation.tokens_per_pass == pytest.approx(
        expected_tokens_per_pass(expectation.alpha, 3), rel=1e-12
    )


@pytest.mark.slow
def test_markov_expectation_differs_from_iid_when_acceptance_varies():
    # The draft is perfect in half the contexts and unrelated in the others.
    target = random_markov(6, seed=0)
    draft = draft_from_target(target, 0.0, seed=1)
    draft.table[:3] = target.table[:3]
    expectation = markov_expectation(target, draft, 4)
    iid = expected_tokens_per_pass(expectation.alpha, 4)
    assert abs(expectation.tokens_per_pass - iid) > 0.05
    trace = generate_speculative(target, draft, [0], 20_000, 4, np.random.default_rng(0))
    assert trace.tokens_per_pass == pytest.approx(expectation.tokens_per_pass, rel=0.03)
    assert abs(trace.tokens_per_pass - iid) > 0.05


@pytest.mark.slow
@pytest.mark.parametrize(("order", "agreement", "k"), [(1, 0.8, 4), (2, 0.6, 3), (1, 0.3, 6)])
def test_measured_tokens_per_pass_within_three_percent_of_theory(order, agreement, k):
    target = random_markov(32 if order == 1 else 8, seed=1, order=order)
    draft = draft_from_target(target, agreement, seed=2)
    trace = generate_speculative(target, draft, [0] * order, 5000, k, np.random.default_rng(0))
    expectation = markov_expectation(target, draft, k)
    assert trace.tokens_per_pass == pytest.approx(expectation.tokens_per_pass, rel=0.03)
    assert trace.acceptance_rate == pytest.approx(expectation.acceptance_rate, abs=0.03)


def test_perfect_draft_theory():
    target = random_markov(8, seed=1)
    expectation = markov_expectation(target, draft_from_target(target, 1.0, seed=2), 4)
    assert expectation.alpha == pytest.approx(1.0)
    assert expectation.tokens_per_pass == pytest.approx(5.0)


@pytest.mark.slow
def test_greedy_expectation_follows_the_closed_class_generation_reaches():
    """Greedy decoding makes the context chain deterministic, with several closed classes (cycles
    of argmax successors); averaging over all of them was off by 6 %, the class reached from the
    start matches the measurement within 1 %."""
    from spec_decode import SamplingParams

    greedy = SamplingParams(temperature=0)
    target = random_markov(32, seed=0)
    draft = draft_from_target(target, 0.8, seed=1)
    expectation = markov_expectation(target, draft, 4, greedy)
    trace = generate_speculative(
        target, draft, [0], 20_000, 4, np.random.default_rng(0), sampling=greedy
    )
    assert trace.tokens_per_pass == pytest.approx(expectation.tokens_per_pass, rel=0.01)


@pytest.mark.slow
def test_an_absurd_k_costs_only_the_depth_the_drafts_reach():
    import time

    target = random_markov(8, seed=0)
    draft = draft_from_target(target, 0.5, seed=1)
    started = time.perf_counter()
    huge = markov_expectation(target, draft, 10**9)
    assert time.perf_counter() - started < 5.0
    assert huge.tokens_per_pass == pytest.approx(
        markov_expectation(target, draft, 2_000).tokens_per_pass, rel=1e-9
    )
