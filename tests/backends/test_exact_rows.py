"""The exact-rows llama.cpp build (``spec-decode build-kernels``): every row of a block of 1..64
tokens bitwise equal to the same token scored alone, on a tiny GGUF with the kernels that matter.

The model is a tiny random K-quant GGUF laid out like the packaged Q4_K_M target
(:mod:`kquant_gguf`).

- ``test_blocks_of_1_to_64_are_bitwise_one_token_rows`` runs where the loaded llama.cpp is the
  exact-rows build and is skipped, saying why, elsewhere.
- ``test_the_check_fails_on_the_stock_build`` runs the same check in a subprocess on
  llama-cpp-python's own libraries and requires it to FAIL (rows of blocks of 4+ differ): the
  check can fail, and this model exercises the batch-dependent kernels.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")

from exact_rows_mark import needs_exact_rows
from kquant_gguf import write_kquant_gguf

from spec_decode import SamplingParams, generate_autoregressive
from spec_decode.backends.llamacpp import LlamaCppModel
from spec_decode.backends.llamacpp.exact_rows import bitwise_equal_rows, row_mismatches
from spec_decode.backends.llamacpp.kernels import (
    exact_block_size,
    invariant_batch_size,
    kernels_status,
    patched_exact_rows,
)
from spec_decode.backends.llamacpp.library import own_library_folder
from spec_decode.backends.llamacpp.raw import RawContext
from spec_decode.certify.identity import identity_certificate, target_only_run
from spec_decode.core.coupled import coupled_rule
from spec_decode.drafting.speculative import generate_speculative

BLOCKS = tuple(range(1, 65))
PROMPT = 24


@pytest.fixture(scope="module")
def kquant_gguf(tmp_path_factory) -> Path:
    return write_kquant_gguf(tmp_path_factory.mktemp("kquant") / "kquant.gguf")


def stock_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LLAMA_CPP_LIB_PATH"}
    env["SPEC_DECODE_KERNELS"] = "stock"
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return env


def check_in_subprocess(model: Path, env: dict[str, str], blocks: str) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "spec_decode.backends.llamacpp.exact_rows",
            str(model),
            "--blocks",
            blocks,
            "--prompt-len",
            str(PROMPT),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_model_is_sane(kquant_gguf):
    """Finite logits with some spread (random K-quant blocks make a usable model)."""
    result = row_mismatches(kquant_gguf, blocks=(1,), prompt_len=PROMPT)
    assert result[1]["rows"] == []


needs_patched = needs_exact_rows(
    "the loaded llama.cpp is not the exact-rows build: run `spec-decode build-kernels`"
)


@needs_patched
def test_blocks_of_1_to_64_are_bitwise_one_token_rows(kquant_gguf):
    result = row_mismatches(kquant_gguf, blocks=BLOCKS, prompt_len=PROMPT)
    bad = {size: r for size, r in result.items() if r["rows"]}
    assert not bad, f"rows differing from one-token rows, by block size: {bad}"


@needs_patched
def test_exact_block_size_is_read_back_from_the_library():
    assert patched_exact_rows() == exact_block_size() == 64
    assert "exact-rows" in kernels_status()
    assert invariant_batch_size() == 1  # every cached row is reusable


@needs_patched
def test_calls_longer_than_a_verification_block_are_one_token_rows_too(kquant_gguf):
    """What lets the engine reuse a whole conversation's cache, generated tokens included, and
    the server read a prompt in one call of up to a micro-batch (512 rows) or in chunks alike."""
    result = row_mismatches(kquant_gguf, blocks=(65, 100, 200, 512), prompt_len=PROMPT)
    assert all(not r["rows"] for r in result.values()), result


@needs_patched
def test_one_thread_and_two_threads_agree(kquant_gguf):
    """Thread count splits the work, never the arithmetic of a row."""
    result = row_mismatches(kquant_gguf, blocks=(5, 16, 33), prompt_len=PROMPT, threads=1)
    assert all(not r["rows"] for r in result.values()), result


@pytest.mark.skipif(
    own_library_folder() is None,
    reason="llama-cpp-python was installed without its own (stock) libraries",
)
def test_the_check_fails_on_the_stock_build(kquant_gguf):
    """On llama-cpp-python's own libraries the same check finds rows that differ: blocks of 2-3
    are exact there (the GEMV), blocks of 4 and more are not."""
    result = check_in_subprocess(kquant_gguf, stock_env(), "1,2,3,4,8,16")
    assert result["exact_rows_build"] == 0
    blocks = {int(k): v for k, v in result["blocks"].items()}
    assert blocks[1]["rows"] == [] and blocks[2]["rows"] == [] and blocks[3]["rows"] == []
    assert blocks[4]["rows"] and blocks[8]["rows"] and blocks[16]["rows"]


@needs_patched
def test_the_check_fails_where_attention_sums_in_another_order(kquant_gguf):
    """The negative control every build can run: a block scored past 256 cells with flash
    attention on and with it off (attention's sums in another order) gives other rows in every
    row, while the check finds each setting's blocks exact (on this build flash attention runs
    each row as alone, so the backend turns it on)."""

    def block(flash_attention: bool) -> np.ndarray:
        tokens = np.random.default_rng(5).integers(3, 200, size=316).tolist()
        with RawContext(kquant_gguf, n_ctx=400, flash_attention=flash_attention) as raw:
            raw.decode(tokens[:300], 0)
            return raw.decode(tokens[300:], 300)

    assert not bitwise_equal_rows(block(True), block(False)).any()
    for flash_attention in (True, False):
        result = row_mismatches(
            kquant_gguf, blocks=(2, 4, 16), prompt_len=300, flash_attention=flash_attention
        )
        assert not any(r["rows"] for r in result.values()), result


@pytest.fixture(scope="module")
def self_drafted(kquant_gguf):
    """The K-quant target and, as its draft, a second copy of the same model: every greedy or
    coupled draft is the target's own choice, so every pass scores k + 1 tokens in one call."""
    return tuple(LlamaCppModel(kquant_gguf, n_threads=2, n_ctx=256) for _ in range(2))


@needs_patched
@pytest.mark.parametrize("k", [16, 32, 48])
def test_greedy_blocks_of_up_to_49_tokens_are_token_identical(self_drafted, k):
    """Greedy output with verification blocks of k + 1 tokens is target-only output, and every
    draft is accepted: the target's block rows are the draft's one-token rows, bit for bit."""
    target, draft = self_drafted
    greedy = SamplingParams(temperature=0)
    for prompt in ([5, 9, 13], [200, 7, 300, 41, 8]):
        plain = generate_autoregressive(
            target, prompt, 120, np.random.default_rng(0), sampling=greedy
        )
        spec = generate_speculative(
            target, draft, prompt, 120, k, np.random.default_rng(0), sampling=greedy
        )
        assert spec.tokens == plain.tokens, (prompt, k)
        assert spec.acceptance_rate == 1.0 and spec.target_passes <= -(-120 // (k + 1)) + 1


@needs_patched
def test_coupled_blocks_of_49_tokens_give_target_only_output_per_seed(self_drafted):
    """At T = 1, for each of 8 seeds, the coupled rule with k = 48 emits target-only output."""
    target, draft = self_drafted
    sampling = SamplingParams(1.0)
    prompt = [5, 9, 13]

    def speculative(source, n):
        return generate_speculative(
            target, draft, prompt, n, 48, source, sampling=sampling, rule=coupled_rule
        )

    certificate = identity_certificate(
        speculative, target_only_run(target, prompt, sampling), range(8), 100
    )
    assert certificate.passed, certificate.mismatched
    # every draft accepted: passes of 49 tokens (rejections are exercised in
    # tests/backends/test_llamacpp_coupled.py)
    assert certificate.accepted == certificate.drafted > 8 * 48, certificate


def test_blocks_are_fed_in_calls_the_build_scores_bitwise(self_drafted, monkeypatch):
    target = self_drafted[0]
    """The committed prompt goes in one call (as target-only decoding feeds it) and drafted
    tokens in calls of at most exact_block_size tokens; without exact_blocks, one call."""
    monkeypatch.setattr(target, "exact_block_size", 3)
    assert target._chunks(1, 0) == [(0, 1)]  # one-token step
    assert target._chunks(5, 0) == [(0, 3), (3, 5)]  # last committed token + 4 drafts
    assert target._chunks(12, 8) == [(0, 9), (9, 12)]  # a 9-token prompt + 3 drafts
    assert target._chunks(4, 1) == [(0, 3), (3, 4)]  # 2 uncached committed tokens + 2 drafts
    monkeypatch.setattr(target, "exact_blocks", False)
    assert target._chunks(12, 8) == [(0, 12)]
