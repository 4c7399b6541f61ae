"""Mechanics of the generator: counting, cutting, determinism, greedy identity, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from spec_decode import (
    MarkovModel,
    SamplingParams,
    draft_from_target,
    generate_autoregressive,
    generate_speculative,
    random_markov,
)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


@pytest.mark.slow
def test_perfect_draft_emits_k_plus_one_tokens_per_pass(pair32):
    target, _ = pair32
    perfect = draft_from_target(target, 1.0, seed=2)
    trace = generate_speculative(target, perfect, [0], 5000, 4, rng())
    assert trace.target_passes == 1000
    assert trace.tokens_per_pass == 5.0
    assert trace.acceptance_rate == 1.0
    assert trace.acceptance_histogram.tolist() == [0, 0, 0, 0, 1000]


@pytest.mark.parametrize(("n_tokens", "k"), [(1, 4), (7, 4), (13, 1), (101, 3), (0, 2)])
def test_emits_exactly_n_tokens(pair32, n_tokens, k):
    target, draft = pair32
    trace = generate_speculative(target, draft, [0], n_tokens, k, rng())
    assert len(trace.tokens) == n_tokens
    assert trace.accepted == sum(trace.accepted_lengths) <= trace.proposed
    assert trace.target_passes == len(trace.accepted_lengths)


def test_k_one_makes_one_or_two_tokens_per_pass(pair32):
    target, draft = pair32
    trace = generate_speculative(target, draft, [0], 500, 1, rng())
    assert 1.0 < trace.tokens_per_pass <= 2.0
    assert set(trace.acceptance_histogram.nonzero()[0]) <= {0, 1}


def test_same_seed_same_tokens(pair32):
    target, draft = pair32
    first = generate_speculative(target, draft, [0], 300, 3, rng(7))
    again = generate_speculative(target, draft, [0], 300, 3, rng(7))
    other = generate_speculative(target, draft, [0], 300, 3, rng(8))
    assert first.tokens == again.tokens
    assert first.tokens != other.tokens


@pytest.mark.parametrize("k", [1, 2, 4, 8])
@pytest.mark.parametrize("agreement", [0.0, 0.5, 0.9])
def test_greedy_is_token_identical_to_target_only_greedy(k, agreement):
    target = random_markov(16, seed=3, order=2)
    draft = draft_from_target(target, agreement, seed=4)
    greedy = SamplingParams(temperature=0)
    speculative = generate_speculative(target, draft, [0, 1], 200, k, rng(1), sampling=greedy)
    reference = generate_autoregressive(target, [0, 1], 200, rng(2), sampling=greedy)
    assert speculative.tokens == reference.tokens


def test_greedy_breaks_ties_by_lowest_id():
    table = np.full((3, 3), 1 / 3)
    target = MarkovModel(table)
    draft = MarkovModel(np.array([[0, 0, 1.0]] * 3))
    trace = generate_speculative(
        target, draft, [0], 5, 2, rng(), sampling=SamplingParams(temperature=0)
    )
    assert trace.tokens == [0] * 5


def test_autoregressive_counts_one_pass_per_token(pair32):
    target, _ = pair32
    trace = generate_autoregressive(target, [0], 50, rng())
    assert trace.target_passes == 50
    assert trace.tokens_per_pass == 1.0
    assert np.isnan(trace.acceptance_rate)


def test_speedup_follows_the_cost_model(pair32):
    target, draft = pair32
    trace = generate_speculative(target, draft, [0], 400, 4, rng())
    expected = 400 / (trace.target_passes + 0.25 * trace.draft_calls)
    assert trace.speedup(0.25) == pytest.approx(expected)


def test_on_tokens_streams_every_emitted_token(pair32):
    target, draft = pair32
    streamed: list[int] = []
    trace = generate_speculative(target, draft, [0], 57, 3, rng(), on_tokens=streamed.extend)
    assert streamed == trace.tokens


class _Fixed:
    """A model that returns one given vector whatever the prefix."""

    def __init__(self, dist, vocab_size=None):
        self.dist = np.asarray(dist, dtype=float)
        self.vocab_size = vocab_size or len(self.dist)

    def next_dist(self, prefix):
        return self.dist


GOOD = [0.25, 0.25, 0.25, 0.25]


@pytest.mark.parametrize(
    ("dist", "message"),
    [
        ([0.5, 0.6, -0.1, 0.0], "negative"),
        ([0.5, np.nan, 0.25, 0.25], "NaN"),
        ([0.5, 0.5, 0.5, 0.5], "not normalised"),
        ([0.5, 0.5], "shape"),
    ],
)
@pytest.mark.parametrize("role", ["target", "draft"])
def test_bad_distributions_are_refused(dist, message, role):
    bad = _Fixed(dist, vocab_size=4)
    target, draft = (bad, _Fixed(GOOD)) if role == "target" else (_Fixed(GOOD), bad)
    with pytest.raises(ValueError, match=message):
        generate_speculative(target, draft, [0], 10, 2, rng())


def test_bad_arguments_are_refused(pair32):
    target, draft = pair32
    with pytest.raises(ValueError, match="k must be >= 1"):
        generate_speculative(target, draft, [0], 10, 0, rng())
    with pytest.raises(ValueError, match="empty"):
        generate_speculative(target, draft, [], 10, 2, rng())
    with pytest.raises(ValueError, match="empty"):
        generate_autoregressive(target, [], 10, rng())
    with pytest.raises(ValueError, match="vocabulary"):
        generate_speculative(target, random_markov(16, seed=0), [0], 10, 2, rng())
    with pytest.raises(ValueError, match="prefix tokens"):
        generate_speculative(target, draft, [32], 10, 2, rng())
    with pytest.raises(ValueError, match="n_tokens"):
        generate_speculative(target, draft, [0], -1, 2, rng())


def test_markov_model_needs_a_long_enough_prefix():
    target = random_markov(8, seed=0, order=2)
    with pytest.raises(ValueError, match="order-2"):
        generate_autoregressive(target, [0], 5, rng())


@pytest.mark.parametrize("kwargs", [{"vocab_size": 1}, {"order": 0}, {"concentration": 0}])
def test_bad_toy_model_arguments_are_refused(kwargs):
    with pytest.raises(ValueError):
        random_markov(**{"vocab_size": 8, "seed": 0, **kwargs})


@pytest.mark.parametrize("agreement", [-0.1, 1.1])
def test_agreement_out_of_range_is_refused(agreement):
    with pytest.raises(ValueError, match="agreement"):
        draft_from_target(random_markov(8, seed=0), agreement, seed=1)


def test_agreement_extremes():
    target = random_markov(8, seed=0)
    assert np.array_equal(draft_from_target(target, 1.0, seed=1).table, target.table)
    unrelated = random_markov(8, seed=1)
    assert np.allclose(draft_from_target(target, 0.0, seed=1).table, unrelated.table)


def test_malformed_rule_output_is_refused(pair32):
    target, draft = pair32
    for bad_rule, message in [
        (lambda p, q, d, r: [], "emitted 0 tokens"),
        (lambda p, q, d, r: "abc", "list of token ids"),
        (lambda p, q, d, r: [99], "outside the vocabulary"),
        (lambda p, q, d, r: [0] * (len(d) + 2), "between 1 and"),
    ]:
        with pytest.raises(ValueError, match=message):
            generate_speculative(target, draft, [0], 10, 2, rng(), rule=bad_rule)


def test_draft_token_with_zero_claimed_probability_is_refused(pair32):
    target, _ = pair32

    class Liar:
        vocab_size = 32

        def propose(self, prefix, k, rng):
            return [0], np.eye(32)[[1]]

    with pytest.raises(ValueError, match="probability 0"):
        generate_speculative(target, None, [0], 10, 2, rng(), drafter=Liar())


def test_stop_tokens_end_generation_after_the_stop_token(pair32):
    target, draft = pair32
    full = generate_speculative(target, draft, [0], 300, 4, rng(3))
    stop = full.tokens[40]
    first = full.tokens.index(stop)
    stopped = generate_speculative(target, draft, [0], 300, 4, rng(3), stop_tokens={stop})
    assert stopped.tokens == full.tokens[: first + 1]
    assert stopped.accepted <= stopped.proposed
    reference = generate_autoregressive(target, [0], 300, rng(3))
    stop = reference.tokens[10]
    cut = generate_autoregressive(target, [0], 300, rng(3), stop_tokens=[stop])
    assert cut.tokens == reference.tokens[: reference.tokens.index(stop) + 1]
