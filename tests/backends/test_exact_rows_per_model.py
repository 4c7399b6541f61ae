"""The exact block size is promised per model (:mod:`spec_decode.backends.llamacpp.promise`): on
the exact-rows build, a model whose weight types the kernels cover (Q4_K, Q5_K, Q3_K, Q2_K and
IQ4_XS projections, as in Q4_K_M, Q5_K_M, Q3_K_M, Q2_K and IQ4_XS files) gets blocks of 64 whose
rows are bitwise one-token rows, one with an uncovered type (IQ2_XXS) the short blocks its rows
keep, and the bitwise check on the model's own weights catches a build that claims more than it
computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")

from exact_rows_mark import needs_exact_rows
from kquant_gguf import QUANTIZED, write_kquant_gguf

from spec_decode import SamplingParams, generate_autoregressive
from spec_decode.backends.llamacpp import LlamaCppModel, promise, slots
from spec_decode.backends.llamacpp.exact_rows import row_mismatches
from spec_decode.backends.llamacpp.isa import cpu_flags
from spec_decode.backends.llamacpp.kernels import (
    exact_block_size,
)
from spec_decode.backends.llamacpp.promise import check_ladder
from spec_decode.certify.identity import identity_certificate, target_only_run
from spec_decode.core.coupled import coupled_rule
from spec_decode.drafting.speculative import generate_speculative

pytestmark = needs_exact_rows("the loaded llama.cpp is not the exact-rows build")


#: the projection types the exact-rows kernels cover, each with the weight types of its model
COVERED = {
    "Q4_K": ("F32", "Q4_K", "Q6_K"),
    "Q5_K": ("F32", "Q4_K", "Q5_K", "Q6_K"),
    "Q3_K": ("F32", "Q3_K", "Q4_K", "Q6_K"),
    "Q2_K": ("F32", "Q2_K", "Q4_K", "Q6_K"),
    "IQ4_XS": ("F32", "IQ4_XS", "Q4_K", "Q6_K"),
    **{q.name: tuple(sorted({"F32", q.name, "Q4_K", "Q6_K"})) for q in QUANTIZED},
}
UNCOVERED = "IQ2_XXS"


@pytest.fixture(scope="module")
def q4_k_m(tmp_path_factory) -> Path:
    return write_kquant_gguf(tmp_path_factory.mktemp("q4km") / "q4_k_m.gguf")


@pytest.fixture(scope="module")
def uncovered(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("uncovered")
    return write_kquant_gguf(folder / "iq2_xxs.gguf", projection=UNCOVERED)


def load(path: Path) -> LlamaCppModel:
    return LlamaCppModel(path, n_threads=2, n_ctx=256)


@pytest.mark.parametrize("projection", COVERED)
def test_a_covered_model_gets_the_builds_blocks_and_keeps_them(projection, tmp_path):
    """Each covered type's kernels, on random weights of that type: the promise is the build's
    64, and every row of blocks of 2 to 64 tokens is bitwise the same token's one-token row."""
    path = write_kquant_gguf(tmp_path / f"{projection}.gguf", projection=projection)
    rows = load(path).exact_rows
    assert rows.size == rows.build_size == 64 and not rows.reduced
    assert rows.weight_types == COVERED[projection] and rows.uncovered == ()
    assert rows.checked == check_ladder(rows.weight_types, cpu_flags()) and rows.differed is None
    result = row_mismatches(path, blocks=(2, 3, 4, 8, 16, 64), prompt_len=24)
    assert all(not result[b]["rows"] for b in result), {b: r["rows"] for b, r in result.items()}


def test_uncovered_rows_of_long_blocks_differ_on_this_build(uncovered):
    """What makes the per-model promise necessary: the kernels the patch does not cover sum
    rows of blocks of 8 or more in another order than one-token rows."""
    result = row_mismatches(uncovered, blocks=(2, 4, 8, 16), prompt_len=24)
    assert not result[2]["rows"] and not result[4]["rows"]
    assert result[8]["rows"] and result[16]["rows"]


def test_an_uncovered_model_gets_short_blocks_and_says_why(uncovered):
    model = load(uncovered)
    rows = model.exact_rows
    assert rows.weight_types == ("F32", UNCOVERED, "Q4_K", "Q6_K")
    assert rows.uncovered == (UNCOVERED,) and rows.reduced
    assert model.exact_block_size == rows.size == promise.UNCOVERED_BLOCK
    assert f"do not cover {UNCOVERED}" in rows.why
    assert model.invariant_batch_size is None  # no cached row is reused across prompts


def test_the_check_catches_a_claim_the_rows_do_not_keep(uncovered, monkeypatch):
    """The negative control: a table that wrongly lists IQ2_XXS as covered claims 64, and the
    bitwise check on the model's weights refuses it at the first block that differs."""
    monkeypatch.setattr(promise, "COVERED_TYPES", promise.COVERED_TYPES | {UNCOVERED})
    monkeypatch.setattr(promise, "_read", lambda key: None)  # not the promise cached above
    rows = load(uncovered).exact_rows
    assert rows.differed == 8 and rows.size == 4
    assert "8-token blocks differ" in rows.why


def test_the_check_computes_every_rows_output_layer(tmp_path, monkeypatch):
    """llama.cpp runs the output layer on the rows whose logits are asked for only, so a check
    that asked for the compared rows alone would score an output layer of another type in its
    one-row kernel: here the output layer alone is IQ2_XXS, wrongly listed as covered, and the
    check still refuses blocks of 8."""
    monkeypatch.setattr(promise, "COVERED_TYPES", promise.COVERED_TYPES | {UNCOVERED})
    path = write_kquant_gguf(tmp_path / "iq2_xxs_output.gguf", output=UNCOVERED)
    rows = load(path).exact_rows
    assert rows.differed == 8 and rows.size == 4


def test_the_promise_is_cached_per_model_build_and_cpu(q4_k_m, monkeypatch):
    load(q4_k_m)

    def no_check(*args, **kwargs):
        raise AssertionError("a model checked before was checked again")

    monkeypatch.setattr(promise, "checked_block_size", no_check)
    assert load(q4_k_m).exact_rows.size == 64


def test_a_drafts_slots_are_not_checked(q4_k_m, monkeypatch):
    """A draft proposes from what it computed, so its slots take the build's size unchecked
    (the server opens the draft with as many slots as the target)."""

    def no_check(*args, **kwargs):
        raise AssertionError("a draft's rows were checked")

    monkeypatch.setattr(slots, "exact_rows", no_check)
    models, _ = slots.open_slots(q4_k_m, 2, n_threads=2, n_ctx=256, check_rows=False)
    try:
        assert all(m.exact_rows is None for m in models)
        assert models[0].exact_block_size == exact_block_size()
    finally:
        models[0].close()


def test_greedy_and_seeded_output_on_an_uncovered_model_is_target_only_output(uncovered):
    """With its blocks cut to what its rows keep, an IQ2_XXS model self-drafting 16 tokens a
    step (every draft its own choice) emits target-only output: greedy, and for each of 4 seeds
    at T = 0.7 under the coupled rule."""
    target, draft = load(uncovered), load(uncovered)
    prompt = [5, 9, 13, 200, 7]
    greedy = SamplingParams(temperature=0)
    plain = generate_autoregressive(target, prompt, 80, np.random.default_rng(0), sampling=greedy)
    spec = generate_speculative(
        target, draft, prompt, 80, 16, np.random.default_rng(0), sampling=greedy
    )
    assert spec.tokens == plain.tokens and spec.acceptance_rate == 1.0
    warm = SamplingParams(0.7)

    def speculative(source, n):
        return generate_speculative(
            target, draft, prompt, n, 16, source, sampling=warm, rule=coupled_rule
        )

    certificate = identity_certificate(
        speculative, target_only_run(target, prompt, warm), range(4), 80
    )
    assert certificate.passed, certificate.mismatched
