"""The suffix drafter: proposals on hand-made sequences, incremental indexing, exhaustive exactness
on toy Markov models, and a broken variant (a model's q reported for a deterministic proposal)
that must FAIL."""

from __future__ import annotations

import numpy as np
import pytest

from spec_decode import SamplingParams, draft_from_target, random_markov
from spec_decode.certify.exhaustive import exact_output_distribution
from spec_decode.drafting.policies import FixedK, ScheduleK
from spec_decode.drafting.suffix import SuffixDrafter, SuffixHistory, SuffixIndex, continuation

TOLERANCE = 1e-12


class NoRandomness:
    """A random source that fails the test if the drafter draws from it."""

    def bernoulli(self, prob: float) -> bool:
        raise AssertionError("the suffix drafter drew randomness")

    categorical = uniform = bernoulli


@pytest.mark.parametrize(
    ("context", "max_match", "min_probability", "k", "expected"),
    [
        # the longest recurring suffix "3 1 2" was followed by "3 1 2" once, then by nothing
        ([1, 2, 3, 1, 2, 3, 1, 2], 3, 0.5, 16, [3, 1, 2]),
        # matching only "1 2" (seen 3 times, followed twice): more continuation to copy
        ([1, 2, 3, 1, 2, 3, 1, 2], 2, 0.5, 16, [3, 1, 2, 3, 1, 2]),
        # "5 1" went on to 7, 7, 9: 7 at 2/3, then "5 1 7 5 1" splits 1/2 and 2/3 * 1/2 < 0.5
        ([5, 1, 7, 5, 1, 7, 5, 1, 9, 5, 1], 3, 0.5, 16, [7, 5, 1]),
        ([5, 1, 7, 5, 1, 7, 5, 1, 9, 5, 1], 3, 0.7, 16, []),  # 2/3 is below the threshold
        ([5, 1, 7, 5, 1, 7, 5, 1, 9, 5, 1], 3, 0.0, 16, [7, 5, 1, 7, 5, 1, 9, 5, 1]),
        # the longest match wins over the most frequent shorter one
        ([1, 2, 3, 9, 2, 3, 8, 1, 2, 3], 3, 0.1, 16, [9, 2, 3, 8, 1, 2, 3]),
        ([1, 2, 3, 9, 2, 3, 8, 1, 2, 3], 3, 0.1, 2, [9, 2]),  # capped by k
        ([4, 6, 4, 7, 4], 1, 0.0, 3, [6, 4, 7]),  # a tie of counts goes to the lowest id (6)
        ([0, 1, 2, 3], 3, 0.1, 4, []),  # nothing recurs
        ([4], 3, 0.1, 4, []),
    ],
)
def test_proposals_on_hand_made_sequences(context, max_match, min_probability, k, expected):
    drafter = SuffixDrafter(10, max_match=max_match, min_probability=min_probability)
    tokens, q = drafter.propose(context, k, NoRandomness())
    assert tokens == expected
    assert q.shape == (len(expected), 10)
    assert np.array_equal(q.argmax(axis=1), expected) and np.all(q.sum(axis=1) == 1)


def test_a_minimum_match_length_ignores_shorter_matches():
    context = [5, 1, 7, 2, 8, 5]  # only "5" recurs
    assert SuffixDrafter(10, min_match=1).propose(context, 4, None)[0] == [1, 7, 2, 8]
    assert SuffixDrafter(10, min_match=2).propose(context, 4, None)[0] == []
    assert SuffixDrafter(10, min_match=2).propose([*context, 1], 4, None)[0] == [7, 2, 8, 5]


def test_a_proposal_capped_at_j_is_the_first_j_tokens():
    context = list(np.random.default_rng(0).integers(0, 3, 60))
    drafter = SuffixDrafter(3, min_probability=0.0)
    full, _ = drafter.propose(context, 16, NoRandomness())
    for j in range(len(full) + 1):
        assert drafter.propose(context, j, NoRandomness())[0] == full[:j]


def test_incremental_index_equals_a_fresh_one_and_branches_rebuild():
    rng = np.random.default_rng(1)
    context = list(rng.integers(0, 4, 200))
    grown = SuffixDrafter(4, max_match=4, max_tokens=6, min_probability=0.2)
    for end in range(1, len(context) + 1):
        fresh = SuffixDrafter(4, max_match=4, max_tokens=6, min_probability=0.2)
        prefix = context[:end]
        assert grown.propose(prefix, 6, NoRandomness())[0] == fresh.propose(prefix, 6, None)[0]
    other = [*context[:50], 3, 3, 3, 3]  # another branch: the index is rebuilt from it
    assert (
        grown.propose(other, 6, None)[0] == SuffixDrafter(4, 4, 6, 0.2).propose(other, 6, None)[0]
    )


def test_the_index_is_cut_at_its_depth():
    index = SuffixIndex(depth=3)
    index.extend([1, 2, 1, 2])
    # matching "1 2" leaves room for one token below it; matching "2" for two
    assert continuation(index.longest_match(index.tokens, 2, 1)[1], 5, 0.0) == [1]
    assert continuation(index.longest_match(index.tokens, 1, 1)[1], 5, 0.0) == [1, 2]
    with pytest.raises(ValueError, match="depth"):
        SuffixIndex(depth=1)


def brute_force_continuation(documents, context, max_match, min_match, depth, min_probability):
    """The suffix drafter's rule by direct counting over every document: a reference for the
    index's scans."""

    def followers(substring):  # the token after each occurrence, within the depth
        if len(substring) >= depth:
            return []
        n = len(substring)
        return [
            doc[i + n]
            for doc in documents
            for i in range(len(doc) - n)
            if doc[i : i + n] == substring
        ]

    substring = None
    for m in range(min(max_match, len(context), depth - 1), min_match - 1, -1):
        if followers(context[len(context) - m :]):
            substring = list(context[len(context) - m :])
            break
    proposal, probability = [], 1.0
    while substring is not None and (after := followers(substring)):
        counts = {token: after.count(token) for token in after}
        token = min(counts, key=lambda t: (-counts[t], t))
        probability *= counts[token] / len(after)
        if probability < min_probability:
            break
        proposal.append(token)
        substring.append(token)
    return proposal


def test_the_index_counts_as_a_suffix_tree_would():
    rng = np.random.default_rng(7)
    for _ in range(60):
        documents = [
            list(rng.integers(0, 3, rng.integers(1, 40))) for _ in range(rng.integers(1, 4))
        ]
        documents = [[int(t) for t in doc] for doc in documents]
        index = SuffixIndex(depth=int(rng.integers(2, 9)))
        for doc in documents:
            index.start_document()
            index.extend(doc)
        context = documents[-1]
        for max_match, min_match, min_probability in [(3, 1, 0.0), (5, 2, 0.3), (1, 1, 0.5)]:
            _, node = index.longest_match(context, max_match, min_match)
            assert continuation(node, 50, min_probability) == brute_force_continuation(
                documents, context, max_match, min_match, index.depth, min_probability
            )


def test_the_history_forgets_its_oldest_requests_first():
    history = SuffixHistory(max_tokens=8)
    history.add([1, 2, 3, 4])
    history.add([5, 6, 7])
    drafter = SuffixDrafter(10, min_match=2, history=history)
    assert drafter.propose([0, 1, 2], 2, None)[0] == [3, 4]  # 8 tokens with the separator
    history.add([8, 9])
    drafter.begin_request()
    assert drafter.propose([0, 1, 2], 2, None)[0] == []  # the first request is forgotten whole
    assert drafter.propose([0, 5, 6], 2, None)[0] == [7]
    with pytest.raises(ValueError, match="max_tokens"):
        SuffixHistory(max_tokens=0)


def test_a_shared_history_proposes_what_earlier_requests_did():
    history = SuffixHistory()
    history.add([7, 1, 2, 3, 4, 5, 6, 8])  # an earlier request
    history.add([9, 9, 9])  # nothing spans from the first sequence into this one
    drafter = SuffixDrafter(10, min_match=2, history=history)
    assert drafter.propose([0, 1, 2], 4, NoRandomness())[0] == [3, 4, 5, 6]
    assert drafter.propose([0, 8, 9], 4, NoRandomness())[0] == []  # "8 9" spans two documents
    assert SuffixDrafter(10, min_match=2).propose([0, 1, 2], 4, None)[0] == []  # no history


def test_the_longer_match_wins_and_the_request_wins_ties():
    history = SuffixHistory()
    history.add([1, 2, 3, 7, 7, 2, 3, 5])
    drafter = SuffixDrafter(10, min_probability=0.0, history=history)
    # the request's own "2 3" (followed by 4) ties the history's "2 3": its own continuation
    assert drafter.propose([2, 3, 4, 0, 2, 3], 1, None)[0] == [4]
    # the history's "1 2 3" is longer than the request's "2 3"
    assert drafter.propose([2, 3, 4, 0, 1, 2, 3], 1, None)[0] == [7]


def test_a_history_changed_mid_request_is_refused():
    history = SuffixHistory()
    drafter = SuffixDrafter(10, history=history)
    drafter.propose([1, 2, 3], 2, None)
    history.add([1, 2, 3, 4])
    with pytest.raises(ValueError, match="middle of a request"):
        drafter.propose([1, 2, 3, 4], 2, None)
    assert drafter.propose([5, 1, 2, 3], 2, None)[0] == [4]  # the next request reads it


@pytest.mark.parametrize(
    "kwargs",
    [
        {"vocab_size": 0},
        {"max_match": 0},
        {"min_match": 0},
        {"min_match": 4, "max_match": 3},
        {"max_tokens": 0},
        {"min_probability": 1.5},
    ],
)
def test_bad_arguments_are_refused(kwargs):
    with pytest.raises(ValueError):
        SuffixDrafter(**{"vocab_size": 4, **kwargs})


# ---- exactness ---------------------------------------------------------------------------------

SHAPES = {"V=2, 6 tokens": (2, 6, [0, 1, 1, 0, 1]), "V=3, 4 tokens": (3, 4, [0, 1, 2, 0, 1])}
SAMPLINGS = {
    "plain": SamplingParams(),
    "temperature 0.7, top-k 2": SamplingParams(temperature=0.7, top_k=2),
    "greedy": SamplingParams(temperature=0),
}


@pytest.mark.parametrize("sampling", SAMPLINGS)
@pytest.mark.parametrize("shape", SHAPES)
def test_suffix_drafter_is_exact(shape, sampling):
    vocab, n_tokens, prefix = SHAPES[shape]
    target = random_markov(vocab, seed=5)
    result = exact_output_distribution(
        target,
        None,
        prefix,
        n_tokens,
        ScheduleK(initial=2, k_max=4),
        sampling=SAMPLINGS[sampling],
        drafter=SuffixDrafter(vocab, max_match=3, min_probability=0.0),
    )
    assert abs(result.total_probability - 1) < TOLERANCE
    assert result.tv < TOLERANCE


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_suffix_drafter_with_a_shared_history_is_exact(sampling):
    target = random_markov(3, seed=5)
    history = SuffixHistory()
    history.add([0, 1, 2, 0, 1, 2, 2, 1, 0, 1, 2, 1])  # an earlier request's text
    result = exact_output_distribution(
        target,
        None,
        [0, 1, 2, 0, 1],
        4,
        FixedK(3),
        sampling=SAMPLINGS[sampling],
        drafter=SuffixDrafter(3, max_match=3, min_probability=0.0, history=history),
    )
    assert abs(result.total_probability - 1) < TOLERANCE
    assert result.tv < TOLERANCE


def test_suffix_drafter_reporting_a_model_q_fails(reports_model_q):
    target = random_markov(3, seed=5)
    draft = draft_from_target(target, 0.5, seed=6)
    broken = reports_model_q(SuffixDrafter(3, max_match=3, min_probability=0.0), draft)
    result = exact_output_distribution(target, None, [0, 1, 2, 0, 1], 4, FixedK(2), drafter=broken)
    assert result.tv > 1e-3


def test_a_drafter_kept_across_requests_indexes_only_a_follow_ups_new_tokens():
    """A server keeps one suffix drafter: a follow-up turn's prompt extends the last request's
    context, so its index grows instead of being built again; the history added in between is
    read from the new request on, and a change in the middle of a request is still refused."""
    shared = SuffixHistory()
    drafter = SuffixDrafter(16, max_match=4, max_tokens=4, history=shared)
    first = [1, 2, 3, 4, 1, 2]
    drafter.propose_tokens(first, 4)
    index = drafter._index
    shared.add([*first, 3, 4])
    with pytest.raises(ValueError, match="changed"):
        drafter.propose_tokens([*first, 3], 4)
    drafter.begin_request()
    follow_up = [*first, 3, 4, 9, 1, 2]
    assert drafter.propose_tokens(follow_up, 4) == [3, 4, 1, 2]
    assert drafter._index is index and drafter._index.tokens == follow_up
