"""The transformers backend, on tiny randomly initialised Qwen2 models built in code (no download).

The target uses fp16-weight linear layers (the format the real target uses); drafts use int8 or
fp32. Tolerances: block scores must match one-token-at-a-time scores to within 1e-4 in
log-probability (fp16 and fp32 weights differ from bitwise equality by ~1e-6 here).
"""

from __future__ import annotations

from collections.abc import Sequence
from copy import deepcopy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from kv_cache_contract import check_draft_cache, check_target_cache  # noqa: E402
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM  # noqa: E402

from spec_decode import (  # noqa: E402
    SamplingParams,
    exact_rule,
    generate_autoregressive,
    generate_speculative,
)
from spec_decode.backends.transformers import (  # noqa: E402
    TransformersModel,
    check_pair,
    load_model,
)
from spec_decode.backends.transformers.cpu_linear import pack_linears  # noqa: E402
from spec_decode.certify.generators import chain_generator  # noqa: E402
from spec_decode.certify.goodness_of_fit import samples_for_power  # noqa: E402
from spec_decode.certify.statistical import statistical_certificate  # noqa: E402
from spec_decode.certify.zoo.rules import resample_from_target  # noqa: E402

VOCAB = 5
CONTEXT = 64
LOGPROB_TOLERANCE = 1e-4
SIGNIFICANCE = 0.01
DETECTABLE_TV = 0.05
POWER = 0.9
K_STAT = 2
#: Enough runs that the pair test (VOCAB**2 cells) detects any TV >= 0.05 with power >= 0.9.
RUNS = samples_for_power(VOCAB**2, DETECTABLE_TV, SIGNIFICANCE, POWER)


def tiny_qwen(build, seed: int, logit_scale: float = 40.0, noise_from=None):
    """A 1-layer Qwen2 with VOCAB tokens (``build`` is the ``tiny_qwen2`` fixture);
    ``logit_scale`` makes its distributions peaked. With ``noise_from`` the model is a perturbed
    copy of that model (a well-matched draft)."""
    if noise_from is None:
        return build(VOCAB, seed, context=CONTEXT, logit_scale=logit_scale)
    model = build(VOCAB, seed, context=CONTEXT)
    with torch.no_grad():
        for mine, theirs in zip(model.parameters(), noise_from.parameters(), strict=True):
            mine.copy_(theirs + 0.05 * theirs.std() * torch.randn_like(theirs))
    return model


def adapter(model: Qwen2ForCausalLM, weights: str) -> TransformersModel:
    return TransformersModel(pack_linears(deepcopy(model), weights))


#: Slow: torch and tiny transformers models.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


@pytest.fixture(scope="module")
def target_net(tiny_qwen2):
    return tiny_qwen(tiny_qwen2, seed=0)


@pytest.fixture(scope="module")
def target(target_net):
    return adapter(target_net, "fp16")


@pytest.fixture(scope="module")
def close_draft(tiny_qwen2, target_net):
    """A perturbed int8 copy of the target: long accepted runs, some rejections."""
    return adapter(tiny_qwen(tiny_qwen2, seed=1, noise_from=target_net), "int8")


@pytest.fixture(scope="module")
def far_draft(tiny_qwen2):
    """An unrelated fp32 model: frequent rejections."""
    return adapter(tiny_qwen(tiny_qwen2, seed=2, logit_scale=25.0), "fp32")


def prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, VOCAB, size=rng.integers(1, 9)).tolist() for _ in range(n)]


def one_at_a_time(model: TransformersModel, prefix: list[int], tokens: list[int]) -> np.ndarray:
    """Reference rows: each next-token distribution computed from an empty cache."""
    rows = []
    for i in range(len(tokens) + 1):
        model.reset()
        rows.append(model.next_dist(prefix + tokens[:i]))
    return np.stack(rows)


@pytest.mark.parametrize("weights", ["fp32", "fp16"])
def test_block_scores_match_one_token_scores(target_net, weights):
    model = adapter(target_net, weights)
    rng = np.random.default_rng(1)
    for prefix in prompts(8):
        tokens = rng.integers(0, VOCAB, size=rng.integers(1, 9)).tolist()
        model.reset()
        model.next_dist(prefix[:-1] or prefix)  # a warm cache the block call must reuse or crop
        block = model.score(prefix, tokens)
        assert block.shape == (len(tokens) + 1, VOCAB)
        reference = one_at_a_time(model, prefix, tokens)
        assert np.max(np.abs(np.log(block) - np.log(reference))) < LOGPROB_TOLERANCE


def test_rows_are_raw_float64_distributions(target):
    dist = target.next_dist([1, 2, 3])
    assert dist.dtype == np.float64 and dist.shape == (VOCAB,)
    assert abs(dist.sum() - 1) < 1e-12 and dist.min() > 0


def first_divergence(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)


@pytest.mark.parametrize("draft_name", ["close_draft", "far_draft"])
def test_greedy_speculative_is_token_identical_to_greedy_target(request, target, draft_name):
    draft = request.getfixturevalue(draft_name)
    greedy = SamplingParams(temperature=0)
    rng = np.random.default_rng(0)  # greedy runs consume no randomness
    for prompt in prompts(10, seed=3):
        reference = generate_autoregressive(target, prompt, 24, rng, sampling=greedy).tokens
        for k in (1, 2, 3, 5, 8):
            trace = generate_speculative(target, draft, prompt, 24, k, rng, sampling=greedy)
            at = first_divergence(trace.tokens, reference)
            if at is not None:  # report a near-tie (block vs one-token rounding) explicitly
                target.reset()
                logits = np.log(target.next_dist(prompt + reference[:at]))
                gap = np.diff(np.sort(logits)[-2:])[0]
                pytest.fail(f"prompt {prompt}, k={k}: diverged at {at}, top-2 logit gap {gap:.2e}")
            assert trace.target_passes < len(reference) or draft_name == "far_draft"


def test_close_draft_is_mostly_accepted(target, close_draft):
    trace = generate_speculative(
        target, close_draft, [1, 2], 48, 4, np.random.default_rng(0), sampling=SamplingParams(0)
    )
    assert trace.acceptance_rate > 0.6


def assert_close(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape
    assert np.max(np.abs(np.log(actual) - np.log(expected))) < LOGPROB_TOLERANCE


def cold_score(model: TransformersModel, prefix: list[int], tokens: list[int]) -> np.ndarray:
    """The rows from an empty cache: a fresh adapter on the same network."""
    return TransformersModel(model.model).score(prefix, tokens)


def test_target_cache_after_full_partial_and_no_acceptance(target):
    check_target_cache(target, lambda c, t: cold_score(target, c, t), assert_close)


def test_draft_cache_after_full_partial_and_no_acceptance(close_draft):
    check_draft_cache(close_draft, VOCAB)  # int8: rows depend on the grouping of tokens


class MemoizedNextDist:
    """The adapter with ``next_dist`` memoized, for computing the reference joint only.

    ``score`` goes straight to the adapter, so speculative runs use the real cache logic.
    """

    def __init__(self, model: TransformersModel) -> None:
        self.model, self.vocab_size, self._memo = model, model.vocab_size, {}

    def next_dist(self, prefix: Sequence[int]) -> np.ndarray:
        key = tuple(prefix)
        if key not in self._memo:
            self._memo[key] = self.model.next_dist(prefix)
        return self._memo[key]

    def score(self, prefix: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        return self.model.score(prefix, tokens)


@pytest.fixture(scope="module")
def certificates(target, far_draft):
    """Seeded certificates with the real adapter in the loop: exact rule and a broken one."""
    memo = MemoizedNextDist(target)
    return {
        rule.__name__: statistical_certificate(
            chain_generator(memo, far_draft, [1, 4], K_STAT, rule=rule),
            memo,
            [1, 4],
            K_STAT,
            RUNS,
            seed=5,
            significance=SIGNIFICANCE,
        )
        for rule in (exact_rule, resample_from_target)
    }


def test_sampled_distributions_match_target_only_sampling(certificates):
    certificate = certificates["exact_rule"]
    assert certificate.passed, certificate.tests


def test_same_test_fails_when_rejection_resamples_from_target(certificates):
    tests = certificates["resample_from_target"].tests
    assert tests["first token"].rejected, tests
    assert tests["tokens 1-2 jointly"].rejected, tests


def test_missing_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no transformers model folder"):
        load_model(tmp_path / "nowhere")


def test_empty_prompt_is_a_clear_error(target):
    with pytest.raises(ValueError, match="prompt is empty"):
        target.next_dist([])


def test_prompt_longer_than_context_window_is_a_clear_error(target):
    with pytest.raises(ValueError, match="context window"):
        target.next_dist([1] * (CONTEXT + 1))
    with pytest.raises(ValueError, match="context window"):
        target.check_fits(CONTEXT - 4, 10)


def test_out_of_vocabulary_token_is_a_clear_error(target):
    with pytest.raises(ValueError, match="token ids"):
        target.score([1, 2], [VOCAB])


def test_vocabulary_mismatch_is_a_clear_error(target):
    other = Qwen2ForCausalLM(Qwen2Config(**{**target.config.to_dict(), "vocab_size": VOCAB + 1}))
    with pytest.raises(ValueError, match="vocabularies differ"):
        check_pair(target, TransformersModel(other))


def word_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    backend = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
    backend.pre_tokenizer = Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token=words[0])


def test_tokenizer_mismatch_is_a_clear_error(target, close_draft):
    words = ["<unk>", "a", "b", "c", "d"]
    check_pair(target, close_draft, word_tokenizer(words), word_tokenizer(words))
    with pytest.raises(ValueError, match="tokenizers differ"):
        check_pair(target, close_draft, word_tokenizer(words), word_tokenizer(words[::-1]))


#: Enumerated output vs the target's joint: the adapter's block scores differ from its one-token
#: scores by float rounding (~1e-6 in probability), which bounds how close the two can be.
ENUMERATED_TV_TOLERANCE = 1e-4


@pytest.mark.parametrize(
    ("sampling", "k"),
    [(SamplingParams(), 1), (SamplingParams(temperature=0.7, top_k=3), 2)],
    ids=["plain", "warped"],
)
def test_real_adapter_in_the_loop_is_exact_by_enumeration(target, far_draft, sampling, k):
    """Both caches are reset before every path (``reset=``): a cache surviving from one path
    to the next changes later rows by float rounding, which the enumeration's replay check
    rejects (it did, depending on the state earlier tests left the fixtures in).

    Plain sampling drafts k = 1 (3 tokens: blocks of 2 and the steps after them), where every
    vocabulary entry branches: k = 2 took 12,000 paths of real forward passes. Top-k 3 keeps
    k = 2 (a full block and the step after it) affordable."""
    from spec_decode.certify.exhaustive import exact_distribution

    def reset() -> None:
        target.reset()
        far_draft.reset()

    def enumerate_rule(rule):
        generate = chain_generator(target, far_draft, [1, 2], k, sampling=sampling, rule=rule)
        return exact_distribution(generate, target, [1, 2], 3, sampling, reset=reset)

    exact, broken = enumerate_rule(exact_rule), enumerate_rule(resample_from_target)
    assert abs(exact.total_probability - 1) < 1e-12
    assert exact.tv < ENUMERATED_TV_TOLERANCE, exact.tv
    assert broken.tv > 10 * ENUMERATED_TV_TOLERANCE, broken.tv
