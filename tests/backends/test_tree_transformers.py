"""Tree attention on the transformers backend, on tiny random Qwen2 models built in code.

``score_tree`` feeds a whole token tree in one forward pass with a 4D attention mask; each row
must equal scoring that node's path as a plain sequence from an empty cache, to within 1e-4 in
log-probability (fp16-weight layers differ from bitwise equality by ~1e-6 here).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


from spec_decode import NumpySource, SamplingParams, generate_autoregressive  # noqa: E402
from spec_decode.backends.transformers import TransformersModel  # noqa: E402
from spec_decode.backends.transformers.cpu_linear import pack_linears  # noqa: E402
from spec_decode.core.tree import TreeShape, score_tree  # noqa: E402
from spec_decode.drafting.speculative import generate_tree  # noqa: E402
from spec_decode.drafting.tree_drafters import ModelTreeDrafter  # noqa: E402

VOCAB = 7
LOGPROB_TOLERANCE = 1e-4


def tiny_model(build, seed: int, weights: str) -> TransformersModel:
    """A 2-layer Qwen2 (so the mask must hold in every layer) with peaked distributions."""
    return TransformersModel(pack_linears(build(VOCAB, seed, layers=2, logit_scale=20.0), weights))


#: Slow: torch and tiny transformers models.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


@pytest.fixture(scope="module")
def target(tiny_qwen2):
    return tiny_model(tiny_qwen2, 0, "fp16")


@pytest.fixture(scope="module")
def draft(tiny_qwen2):
    """An unrelated model: trees with many distinct paths."""
    return tiny_model(tiny_qwen2, 1, "fp32")


@pytest.fixture(scope="module")
def close_draft(tiny_qwen2):
    """The target's weights in int8: drafts the target mostly accepts."""
    return tiny_model(tiny_qwen2, 0, "int8")


def path_rows(model: TransformersModel, prefix: list[int], tree) -> np.ndarray:
    """Reference: every row computed from an empty cache with the path as a plain sequence."""
    rows = []
    for path in [[]] + [tree.path(i) for i in range(tree.size)]:
        model.reset()
        rows.append(model.next_dist(prefix + path))
    return np.stack(rows)


@pytest.mark.parametrize(
    ("prefix", "widths"),
    [([3], (3, 2, 1)), ([1, 4, 0, 2], (2, 2)), ([5, 5], (1, 1, 1)), ([0, 6, 2], (4,))],
)
def test_tree_rows_equal_per_path_rows(target, draft, prefix, widths):
    tree = ModelTreeDrafter(draft).propose_tree(
        prefix, TreeShape(widths), NumpySource(np.random.default_rng(0))
    )
    reference = path_rows(target, prefix, tree)
    for cached in ([], prefix[:-1], prefix):  # cold cache, warm cache, cache covering the prefix
        target.reset()
        if cached:
            target.next_dist(cached)
        calls = target.stats.calls
        rows = target.score_tree(prefix, list(tree.tokens), list(tree.parents))
        assert target.stats.calls == calls + 1  # ONE forward pass
        np.testing.assert_allclose(np.log(rows), np.log(reference), atol=LOGPROB_TOLERANCE)
        assert target.cached_tokens == prefix and target.cache_length == len(prefix)
    # The cache left behind is a plain prefix cache: the next block scores correctly.
    rows = target.score(prefix, [tree.tokens[0]])
    np.testing.assert_allclose(np.log(rows), np.log(reference[:2]), atol=LOGPROB_TOLERANCE)


def test_model_score_tree_is_used_by_the_sampler(target, draft):
    tree = ModelTreeDrafter(draft).propose_tree(
        [2], TreeShape((2, 2)), NumpySource(np.random.default_rng(1))
    )
    target.reset()
    calls = target.stats.calls
    rows = score_tree(target, [2], tree)
    assert target.stats.calls == calls + 1
    assert rows.shape == (tree.size + 1, VOCAB)


@pytest.mark.parametrize("replacement", [True, False])
def test_greedy_tree_generation_is_token_identical_to_greedy_decoding(
    target, close_draft, replacement
):
    greedy = SamplingParams(temperature=0)
    rng = np.random.default_rng(0)
    tree = generate_tree(
        target, close_draft, [1, 2], 30, (2, 2, 1), rng, sampling=greedy, replacement=replacement
    )
    reference = generate_autoregressive(target, [1, 2], 30, rng, sampling=greedy)
    assert tree.tokens == reference.tokens
    assert tree.target_passes < 30
