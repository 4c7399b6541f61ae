"""Sliding-window models on the transformers backend: served while the whole sequence fits in the
window (where the window changes nothing), refused up front with a ``ValueError`` otherwise.

Past W tokens a sliding-window layer keeps only the last W - 1 keys, and transformers cannot
crop such a cache back after a rejected draft (it raised ``RuntimeError`` in ``crop`` before).
"""

from __future__ import annotations

import json
from copy import deepcopy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from typer.testing import CliRunner  # noqa: E402

from spec_decode import SamplingParams, generate_autoregressive, generate_speculative  # noqa: E402
from spec_decode.backends.transformers import TransformersModel  # noqa: E402
from spec_decode.backends.transformers.cpu_linear import pack_linears  # noqa: E402
from spec_decode.cli.app import app  # noqa: E402
from spec_decode.drafting.speculative import generate_tree  # noqa: E402

#: Slow: torch and tiny transformers models.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

VOCAB, CONTEXT, WINDOW = 5, 64, 12
#: Every layer of these tiny models attends to a sliding window of WINDOW tokens.
SLIDING = {"use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 0}
GREEDY = SamplingParams(temperature=0)
PROMPT = "def x ( ) :"


def tiny(build, seed: int, sliding: bool, weights: str = "fp32", scale: float = 20.0):
    net = build(
        VOCAB, seed, layers=2, context=CONTEXT, logit_scale=scale, **(SLIDING if sliding else {})
    )
    return TransformersModel(pack_linears(deepcopy(net), weights))


@pytest.fixture(scope="module")
def sliding_target(tiny_qwen2):
    return tiny(tiny_qwen2, 0, sliding=True, weights="fp16")


@pytest.fixture(scope="module")
def full_target(tiny_qwen2):
    """The same weights with full attention."""
    return tiny(tiny_qwen2, 0, sliding=False, weights="fp16")


@pytest.fixture(scope="module")
def sliding_draft(tiny_qwen2):
    return tiny(tiny_qwen2, 1, sliding=True, weights="int8", scale=10.0)


def test_the_sliding_window_is_the_context_window(sliding_target, full_target):
    assert sliding_target.sliding_window == WINDOW
    assert sliding_target.context_window == WINDOW
    assert full_target.sliding_window is None and full_target.context_window == CONTEXT
    sliding_target.check_fits(4, WINDOW - 4)  # fits exactly: fine
    with pytest.raises(ValueError, match=f"sliding attention window of {WINDOW} tokens"):
        sliding_target.check_fits(4, WINDOW - 3)


def test_a_sequence_past_the_window_is_refused_before_any_forward(sliding_target):
    calls = sliding_target.stats.calls
    with pytest.raises(ValueError, match="sliding attention window"):
        sliding_target.next_dist([1] * (WINDOW + 1))
    with pytest.raises(ValueError, match="sliding attention window"):
        sliding_target.score([1, 2, 3], [0] * (WINDOW - 2))
    assert sliding_target.stats.calls == calls


def test_generation_inside_the_window_matches_target_only_and_full_attention(
    sliding_target, full_target, sliding_draft
):
    """Speculative runs with rejections (so the caches are cropped) up to the whole window."""
    rng = np.random.default_rng(0)
    for prompt in ([1], [2, 0, 4], [3, 3, 1, 0, 2]):
        n = WINDOW - len(prompt)
        sliding_target.reset()
        reference = generate_autoregressive(sliding_target, prompt, n, rng, sampling=GREEDY).tokens
        full_target.reset()
        assert generate_autoregressive(full_target, prompt, n, rng, sampling=GREEDY).tokens == (
            reference
        )
        for k in (1, 2, 4, 8):
            for model in (sliding_target, sliding_draft):
                model.reset()
            trace = generate_speculative(
                sliding_target, sliding_draft, prompt, n, k, rng, sampling=GREEDY
            )
            assert trace.tokens == reference, (prompt, k)
        # rows inside the window: the window changes nothing
        sliding_target.reset()
        full_target.reset()
        block = sliding_target.score(prompt, reference[:-1])
        assert np.max(np.abs(block - full_target.score(prompt, reference[:-1]))) < 1e-6


def test_sampled_generation_inside_the_window_runs(sliding_target, sliding_draft):
    sliding_target.reset()
    sliding_draft.reset()
    trace = generate_speculative(
        sliding_target, sliding_draft, [1, 2], WINDOW - 2, 3, np.random.default_rng(3)
    )
    assert len(trace.tokens) == WINDOW - 2


def test_a_full_window_cache_is_read_again_instead_of_cropped(sliding_target):
    """Exactly WINDOW tokens fed: the cache cannot be cut back, so it is dropped and re-read."""
    sequence = [1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2]
    sliding_target.reset()
    sliding_target.next_dist(sequence)
    assert sliding_target.cache_length == WINDOW
    shorter = [*sequence[:6], 3]
    row = sliding_target.next_dist(shorter)  # transformers' crop would raise here
    assert sliding_target.cached_tokens == shorter
    sliding_target.reset()
    assert np.array_equal(row, sliding_target.next_dist(shorter))


def test_trees_must_fit_inside_the_window_node_for_node(sliding_target, sliding_draft):
    prefix = [1, 2, 3, 4, 0]
    sliding_target.reset()
    rows = sliding_target.score_tree(prefix, [0, 1, 2, 3, 4, 0, 1], [-1, -1, 0, 0, 1, 1, 2])
    assert rows.shape == (8, VOCAB)  # 5 + 7 nodes = 12: fits
    with pytest.raises(ValueError, match="sliding attention window"):
        sliding_target.score_tree(prefix, [0] * 8, [-1] * 8)
    sliding_target.reset()
    sliding_draft.reset()
    rng = np.random.default_rng(0)
    reference = generate_autoregressive(sliding_target, [2, 1], 6, rng, sampling=GREEDY).tokens
    sliding_target.reset()
    trace = generate_tree(sliding_target, sliding_draft, [2, 1], 6, (2, 1), rng, sampling=GREEDY)
    assert trace.tokens == reference


# --- spec-decode generate: both models are checked before anything streams --------------------


def sliding_folder(tiny_qwen2_folder, folder, seed: int):
    """A tiny saved model whose every layer attends to a sliding window of WINDOW tokens."""
    tiny_qwen2_folder(folder, seed)
    config = json.loads((folder / "config.json").read_text())
    config.update(SLIDING, layer_types=["sliding_attention"] * config["num_hidden_layers"])
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tiny_qwen2_folder):
    root = tmp_path_factory.mktemp("sliding")
    return {
        "sliding-target": sliding_folder(tiny_qwen2_folder, root / "st", seed=0),
        "sliding-draft": sliding_folder(tiny_qwen2_folder, root / "sd", seed=1),
        "full-target": tiny_qwen2_folder(root / "ft", seed=0),
        "full-draft": tiny_qwen2_folder(root / "fd", seed=1),
    }


def generate(target, draft, max_new_tokens: int) -> tuple[int, str]:
    args = ["generate", "--backend", "transformers", "--target", str(target), "--draft"]
    args += [str(draft), "--prompt", PROMPT, "--raw", "--max-new-tokens"]
    args += [str(max_new_tokens), "--k", "3", "--policy", "fixed", "--temperature", "0"]
    result = CliRunner().invoke(app, [*args, "--compare", "--json"])
    return result.exit_code, result.stdout + result.stderr


@pytest.mark.parametrize(
    "target, draft",
    [("sliding-target", "full-draft"), ("full-target", "sliding-draft")],
    ids=["target", "draft"],
)
def test_generate_refuses_a_generation_past_either_models_window(folders, target, draft):
    code, output = generate(folders[target], folders[draft], WINDOW)  # the prompt + WINDOW
    assert code == 2, output
    assert "sliding attention window of 12" in " ".join(output.split())
    assert "token_ids" not in output  # refused before generating


def test_generate_runs_a_sliding_window_pair_that_fits(folders):
    from spec_decode.backends.transformers import load_tokenizer

    n_prompt = len(load_tokenizer(folders["sliding-target"]).encode(PROMPT))
    code, output = generate(folders["sliding-target"], folders["sliding-draft"], WINDOW - n_prompt)
    assert code == 0, output
    payload = json.loads(output[: output.rindex("}") + 1])
    assert payload["prompt_tokens"] == n_prompt
    assert payload["identical_tokens"] is True
    assert 1 <= payload["runs"]["speculative"]["tokens"] <= WINDOW - n_prompt
    code, output = generate(folders["sliding-target"], folders["sliding-draft"], WINDOW)
    assert code == 2 and "sliding attention window" in " ".join(output.split())
