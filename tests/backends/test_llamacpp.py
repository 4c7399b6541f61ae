"""The llama.cpp backend, on tiny random Llama-architecture GGUF files written in the test session.

The models (2 layers, width 32, a 6-token SentencePiece vocabulary, float32 weights) are written
with ``gguf.GGUFWriter``: no download, no conversion. Block rows are compared with one-token rows
bitwise up to the block size the backend states for this build (``exact_block_size``) and within
``LOGPROB_TOLERANCE`` beyond it. Passes with llama-cpp-python 0.3.36 built with
``-DGGML_LLAMAFILE=OFF`` (the recommended build) and with the default build.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("llama_cpp")
gguf = pytest.importorskip("gguf")

from kv_cache_contract import check_draft_cache, check_target_cache, fed  # noqa: E402

from spec_decode import (  # noqa: E402
    ModelDrafter,
    SamplingParams,
    generate_autoregressive,
    generate_speculative,
)
from spec_decode.backends.llamacpp import (  # noqa: E402
    LlamaCppModel,
    build_features,
    check_pair,
    exact_block_size,
    load_model,
    load_tokenizer,
    probabilities,
)
from spec_decode.backends.llamacpp.kernels import patched_exact_rows  # noqa: E402
from spec_decode.certify.tiny_gguf import CONTEXT, TOKENS, perturbed, tiny_weights, write_gguf  # noqa: E402

VOCAB = len(TOKENS)
#: Beyond ``exact_block_size``: on a build with llamafile (the default wheel) the float32 block
#: rows of these models differ from one-token rows by ~1e-4 in log-probability.
LOGPROB_TOLERANCE = 1e-3
GREEDY = SamplingParams(temperature=0)


@pytest.fixture(scope="module")
def gguf_files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("gguf")
    target = tiny_weights(0, logit_scale=6.0)
    return {
        "target": write_gguf(folder / "target.gguf", target),
        "close": write_gguf(folder / "close.gguf", perturbed(target, 1, 0.05)),
        "far": write_gguf(folder / "far.gguf", tiny_weights(2, logit_scale=4.0)),
    }


def open_model(path: Path) -> LlamaCppModel:
    return LlamaCppModel(path, n_threads=1, n_ctx=CONTEXT, max_tree_leaves=8)


@pytest.fixture(scope="module")
def target(gguf_files):
    return open_model(gguf_files["target"])


@pytest.fixture(scope="module")
def cold(gguf_files):
    """A second copy of the target, reset before each use: the reference for cache reuse."""
    return open_model(gguf_files["target"])


@pytest.fixture(scope="module")
def close_draft(gguf_files):
    return open_model(gguf_files["close"])


@pytest.fixture(scope="module")
def far_draft(gguf_files):
    return open_model(gguf_files["far"])


def prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, VOCAB, size=rng.integers(1, 9)).tolist() for _ in range(n)]


def cold_score(model: LlamaCppModel, prefix: list[int], tokens: list[int]) -> np.ndarray:
    model.reset()
    return model.score(prefix, tokens)


def warm(model: LlamaCppModel, prefix: list[int]) -> None:
    """Reset, then cache all of ``prefix`` but its last token (fed as one batch)."""
    model.reset()
    if len(prefix) > 1:
        model.next_dist(prefix[:-1])


def one_at_a_time(model: LlamaCppModel, prefix: list[int], tokens: list[int]) -> np.ndarray:
    """Reference rows: from a warm cache, one token fed per call."""
    warm(model, prefix)
    return np.stack([model.next_dist(prefix + tokens[:i]) for i in range(len(tokens) + 1)])


def assert_close(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape
    assert np.max(np.abs(np.log(actual) - np.log(expected))) < LOGPROB_TOLERANCE


def test_build_features_are_read_at_run_time(target):
    features = build_features()
    assert features, "llama_print_system_info() reported no features"
    assert target.exact_block_size == exact_block_size() in (1, 3, 7, 64)  # 64: exact-rows build
    if "LLAMAFILE" in features and not patched_exact_rows():  # a stock build with llamafile
        assert exact_block_size() == 1


def test_block_scores_match_one_token_scores(target):
    rng = np.random.default_rng(1)
    for prefix in prompts(8):
        tokens = rng.integers(0, VOCAB, size=rng.integers(1, 9)).tolist()
        reference = one_at_a_time(target, prefix, tokens)
        warm(target, prefix)
        block = target.score(prefix, tokens)  # one batch: the last prefix token and the tokens
        if len(tokens) + 1 <= target.exact_block_size:
            np.testing.assert_array_equal(block, reference)
        assert_close(block, reference)


def test_rows_are_raw_float64_distributions(target):
    dist = target.next_dist([1, 2, 3])
    assert dist.dtype == np.float64 and dist.shape == (VOCAB,)
    assert abs(dist.sum() - 1) < 1e-12 and dist.min() > 0


def test_probabilities_are_the_float64_softmax_to_float32_rounding():
    logits = (np.random.default_rng(0).standard_normal(151_936) * 4).astype(np.float32)
    out = probabilities(logits, np.empty(logits.size), np.empty(logits.size, np.float32))
    shifted = logits.astype(np.float64) - logits.max()
    expected = np.exp(shifted) / np.exp(shifted).sum()
    assert out.dtype == np.float64 and abs(out.sum() - 1) < 1e-12
    assert np.max(np.abs(out / expected - 1)) < 1e-5


def test_top_tokens_are_the_argmax_of_the_score_rows(target):
    rng = np.random.default_rng(4)
    for prefix in prompts(8, seed=4):
        tokens = rng.integers(0, VOCAB, size=rng.integers(0, 9)).tolist()
        warm(target, prefix)
        top = target.top_tokens(prefix, tokens)
        warm(target, prefix)
        assert top.tolist() == np.argmax(target.score(prefix, tokens), axis=-1).tolist()


def plain_softmax(logits, out, scratch):
    """A broken variant of :func:`probabilities`: the softmax without keeping the argmax."""
    np.subtract(logits, logits.max(), out=scratch)
    np.exp(scratch, out=scratch)
    out[:] = scratch
    out /= out.sum()
    return out


def argmax_kept(softmax) -> bool:
    """Whether ``softmax`` keeps the logits' argmax on rows whose top logits differ by less
    than the float32 exponential resolves next to 1 (it rounds both to 1.0)."""
    for top in (0.3, 1e-3, -0.2):
        logits = np.array([-5.0, top, np.nextafter(top, 1, dtype=np.float32), 2.0 - 9], np.float32)
        logits = np.concatenate([logits, np.full(1000, -30, np.float32)])
        out = softmax(logits, np.empty(logits.size), np.empty(logits.size, np.float32))
        if np.argmax(out) != np.argmax(logits) or abs(out.sum() - 1) > 1e-12:
            return False
    return True


def test_probabilities_keep_the_logits_argmax_through_float32_rounding():
    assert argmax_kept(probabilities)
    assert not argmax_kept(plain_softmax)


def first_divergence(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)


@pytest.mark.slow
@pytest.mark.parametrize("draft_name", ["close_draft", "far_draft", "target"])
def test_greedy_speculative_is_token_identical_to_greedy_target(request, target, draft_name):
    draft = request.getfixturevalue(draft_name)
    rng = np.random.default_rng(0)  # greedy runs consume no randomness
    for prompt in prompts(6, seed=3):
        reference = generate_autoregressive(target, prompt, 20, rng, sampling=GREEDY).tokens
        for k in (1, 2, 3, 4):
            drafter = ModelDrafter(draft, GREEDY)
            trace = generate_speculative(
                target, None, prompt, 20, k, rng, sampling=GREEDY, drafter=drafter
            )
            at = first_divergence(trace.tokens, reference)
            if at is not None:  # report a near-tie (block vs one-token rounding) explicitly
                logits = np.log(cold_score(target, prompt + reference[:at], [])[0])
                gap = np.diff(np.sort(logits)[-2:])[0]
                pytest.fail(f"prompt {prompt}, k={k}: diverged at {at}, top-2 logit gap {gap:.2e}")


@pytest.mark.slow
def test_close_draft_is_mostly_accepted(target, close_draft):
    trace = generate_speculative(
        target, close_draft, [4, 5], 40, 4, np.random.default_rng(0), sampling=GREEDY
    )
    assert trace.acceptance_rate > 0.6


def test_target_cache_after_full_partial_and_no_acceptance(target, cold):
    check_target_cache(target, lambda c, t: cold_score(cold, c, t), assert_close)


def test_draft_cache_after_full_partial_and_no_acceptance(close_draft):
    cold_draft = LlamaCppModel(close_draft.path, n_threads=1, n_ctx=CONTEXT, max_tree_leaves=1)
    check_draft_cache(close_draft, VOCAB, lambda c, t: cold_score(cold_draft, c, t), assert_close)


#: A tree of 7 nodes: two children of the prefix, node 0 with children 2 and 3, node 2 with
#: children 4 and 5, node 1 with child 6 (breadth-first).
TREE_TOKENS = [4, 5, 5, 3, 4, 2, 4]
TREE_PARENTS = [-1, -1, 0, 0, 2, 2, 1]


def path_to(node: int) -> list[int]:
    path = []
    while node >= 0:
        path.append(TREE_TOKENS[node])
        node = TREE_PARENTS[node]
    return path[::-1]


def test_tree_rows_match_scoring_each_path(target, cold):
    prefix = [1, 4, 5, 3]
    target.reset()
    target.next_dist(prefix[:2])  # a warm cache to reuse
    rows = target.score_tree(prefix, TREE_TOKENS, TREE_PARENTS)
    assert rows.shape == (len(TREE_TOKENS) + 1, VOCAB)
    assert_close(rows[:1], cold_score(cold, prefix, []))
    for node in range(len(TREE_TOKENS)):
        path = path_to(node)
        assert_close(rows[node + 1 : node + 2], cold_score(cold, prefix + path, []))
    assert target.cached_tokens == prefix and target.cache_length == len(prefix)
    # the next call reuses the prefix and feeds the accepted path only
    n, after = fed(target, lambda: target.score(prefix + path_to(4), [5]))
    assert n == 1 + len(path_to(4))
    assert_close(after, cold_score(cold, prefix + path_to(4), [5]))


def test_tree_with_more_leaves_than_sequences_is_a_clear_error(target):
    with pytest.raises(ValueError, match="max_tree_leaves"):
        target.score_tree([1, 2], list(range(1, 6)) * 2, [-1] * 10)


def test_missing_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no GGUF model file"):
        load_model(tmp_path / "nowhere.gguf")


def test_file_that_is_not_gguf_is_a_clear_error(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model")
    with pytest.raises(ValueError, match="could not load"):
        load_model(junk)


def test_empty_prompt_is_a_clear_error(target):
    with pytest.raises(ValueError, match="prompt is empty"):
        target.next_dist([])


def test_prompt_longer_than_context_window_is_a_clear_error(target):
    assert target.context_window == CONTEXT
    with pytest.raises(ValueError, match="context window"):
        target.next_dist([1] * (CONTEXT + 1))
    with pytest.raises(ValueError, match="context window"):
        target.check_fits(CONTEXT - 4, 10)
    with pytest.raises(ValueError, match="context window"):  # every tree node takes a cell
        target.score_tree([1] * (CONTEXT - 3), [4, 5, 4, 5], [-1, -1, -1, -1])


def test_out_of_vocabulary_token_is_a_clear_error(target):
    with pytest.raises(ValueError, match="token ids"):
        target.score([1, 2], [VOCAB])


def test_pair_with_another_vocabulary_is_a_clear_error(target, close_draft, tmp_path):
    check_pair(load_tokenizer(target), load_tokenizer(close_draft))
    renamed = [*TOKENS[:-1], "c"]
    other = open_model(write_gguf(tmp_path / "other.gguf", tiny_weights(3, 4.0), renamed))
    with pytest.raises(ValueError, match="tokenizers differ"):
        check_pair(load_tokenizer(target), load_tokenizer(other))


def test_default_context_is_the_trained_context(gguf_files):
    model = load_model(gguf_files["far"], n_threads=1)
    assert model.context_window == CONTEXT and model.vocab_size == VOCAB


def test_tokenizer_round_trip_and_end_of_generation_ids(target):
    tokenizer = load_tokenizer(target)
    ids = tokenizer.encode("ab a", add_special_tokens=False)
    assert ids == [3, 4, 5, 3, 4]
    assert tokenizer.decode(ids).strip() == "ab a"
    assert 2 in tokenizer.eog_ids


#: Enumerated output vs the target's joint: block rows may differ from one-token rows by kernel
#: rounding, which bounds how close the two can be.
ENUMERATED_TV_TOLERANCE = 1e-4


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sampling", "n_tokens"),
    [(SamplingParams(), 2), (SamplingParams(temperature=0.7, top_k=3), 3)],
    ids=["plain", "warped"],
)
def test_real_adapter_in_the_loop_is_exact_by_enumeration(target, far_draft, sampling, n_tokens):
    """Every execution path of the real generator with the real adapter, enumerated exactly
    (the full 6-token vocabulary makes 3 plain tokens too many paths for a quick test)."""
    from spec_decode.certify.exhaustive import exact_output_distribution
    from spec_decode.certify.zoo import resample_from_target

    exact = exact_output_distribution(target, far_draft, [1, 4], n_tokens, 2, sampling=sampling)
    broken = exact_output_distribution(
        target, far_draft, [1, 4], n_tokens, 2, sampling=sampling, rule=resample_from_target
    )
    assert abs(exact.total_probability - 1) < 1e-12
    assert exact.tv < ENUMERATED_TV_TOLERANCE, exact.tv
    assert broken.tv > 10 * ENUMERATED_TV_TOLERANCE, broken.tv
