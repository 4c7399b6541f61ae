"""The per-model promise (:mod:`spec_decode.backends.llamacpp.promise`), without llama.cpp: the
claim from the weight types, the bitwise check on a model's rows (against scorers that are exact,
and deliberately broken ones it must catch), the GGUF header reader and the fingerprint."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from spec_decode.backends.llamacpp.gguf_header import fingerprint, weight_types
from spec_decode.backends.llamacpp.isa import AVX2_FLAGS, AVX512_FLAGS, AVX512_VNNI_FLAG
from spec_decode.backends.llamacpp.promise import (
    COVERED_TYPES,
    UNCOVERED_BLOCK,
    X86_REPACKED_TYPES,
    ExactRows,
    check_ladder,
    checked_block_size,
    claimed_block_size,
)

VOCAB = 50


class ToyScorer:
    """Logits that depend on a row's token and the tokens before it only: a model whose block
    rows are one-token rows; ``breaks_from`` rows or more in a call add a rounding error to each
    row (a kernel that sums long blocks in another order)."""

    def __init__(self, breaks_from: int | None = None) -> None:
        self.breaks_from = breaks_from
        self.cache: list[int] = []
        self.calls = 0

    def __call__(self, tokens: Sequence[int], first_position: int) -> np.ndarray:
        self.calls += 1
        del self.cache[first_position:]
        rows = []
        for token in tokens:
            self.cache.append(int(token))
            seed = hash(tuple(self.cache)) % 2**32
            rows.append(np.random.default_rng(seed).standard_normal(VOCAB).astype(np.float32))
        logits = np.array(rows)
        if self.breaks_from is not None and len(tokens) >= self.breaks_from:
            logits = np.nextafter(logits, np.float32(np.inf))
        return logits


def test_an_exact_scorer_keeps_the_claim_after_a_short_check() -> None:
    """Two one-token rows and a block where each kernel starts: seven calls, the longest 16
    tokens (longer blocks take its loops; the per-type tests check them up to 64)."""
    scorer = ToyScorer()
    size, checked, differed = checked_block_size(scorer, claim=64, n_vocab=VOCAB)
    assert (size, differed) == (64, None)
    assert checked == (2, 3, 4, 8, 16) and scorer.calls == 7


@pytest.mark.parametrize(
    ("breaks_from", "expected"), [(16, 8), (8, 4), (5, 4), (4, 3), (3, 2), (2, 1)]
)
def test_the_check_catches_rows_that_differ_by_one_ulp(breaks_from: int, expected: int) -> None:
    """The negative control: a scorer whose blocks of ``breaks_from`` tokens or more are one ulp
    off gets the largest size checked below, and the check names the size that differed."""
    size, _, differed = checked_block_size(ToyScorer(breaks_from), claim=64, n_vocab=VOCAB)
    assert size == expected
    assert differed is not None and differed >= breaks_from


@pytest.mark.parametrize("repacked", sorted(X86_REPACKED_TYPES))
def test_the_ladder_checks_the_repacked_loops_where_a_type_may_be_repacked(repacked: str) -> None:
    assert check_ladder(["F32", repacked, "Q6_K"], AVX2_FLAGS) == (2, 3, 4, 8, 16)


def test_the_ladder_skips_the_repacked_loops_where_nothing_is_repacked() -> None:
    """BF16 or Q4_1 weights are never repacked on x86: their kernels switch at 8 rows only."""
    assert check_ladder(["F32", "BF16"], AVX2_FLAGS) == (2, 8)
    assert check_ladder(["F32", "Q4_1", "Q6_K"], AVX2_FLAGS) == (2, 8)
    scorer = ToyScorer()
    assert checked_block_size(scorer, 64, VOCAB, check_ladder(["BF16"], AVX2_FLAGS))[1] == (2, 8)
    assert scorer.calls == 4


def test_the_ladder_checks_the_q6_k_kernel_where_it_runs() -> None:
    """On AVX-512 VNNI the patch's Q6_K kernel scores 1-4 rows in passes of their own, and the
    tiled kernel takes Q6_K from 48 rows: those rungs are checked where a model has Q6_K."""
    vnni = AVX2_FLAGS | AVX512_FLAGS | {AVX512_VNNI_FLAG}
    assert check_ladder(["F32", "Q5_K", "Q6_K"], vnni) == (2, 3, 4, 8, 48)
    assert check_ladder(["F32", "Q4_K", "Q6_K"], vnni) == (2, 3, 4, 8, 16, 48)
    assert check_ladder(["F32", "Q5_K"], vnni) == (2, 8)
    assert check_ladder(["F32", "Q5_K", "Q6_K"], AVX2_FLAGS | AVX512_FLAGS) == (2, 8)


def test_the_ladder_keeps_every_rung_off_x86() -> None:
    """Elsewhere (an ARM CPU's flags, or none read) llama.cpp repacks other types: check all."""
    assert check_ladder(["F32", "Q6_K"], frozenset({"asimd", "sve"})) == (2, 3, 4, 8, 16)
    assert check_ladder(["BF16"], frozenset()) == (2, 3, 4, 8, 16)


def test_a_claim_of_one_checks_nothing() -> None:
    scorer = ToyScorer()
    assert checked_block_size(scorer, claim=1, n_vocab=VOCAB) == (1, (), None)
    assert scorer.calls == 0


def test_the_claim_follows_the_weight_types() -> None:
    assert claimed_block_size(["F32", "Q4_K", "Q6_K"], 64, patched=True) == 64
    assert claimed_block_size(["F32", "IQ2_XXS", "Q6_K"], 64, patched=True) == UNCOVERED_BLOCK
    assert claimed_block_size(["IQ2_XXS"], 3, patched=False) == 3  # a stock build: its own size
    assert claimed_block_size(["IQ3_S"], 2, patched=True) == 2  # never more than the build's
    assert {"Q4_K", "Q6_K", "F32"} <= COVERED_TYPES


def test_why_names_the_reason() -> None:
    covered = ExactRows(64, 64, ("F32", "Q4_K"), (), (2, 3, 4, 8, 16), None)
    assert not covered.reduced
    assert covered.why == (
        "blocks of up to 64 tokens exact (checked bitwise on this model: 2, 3, 4, 8, 16; longer "
        "blocks take the 16-token block's kernels)"
    )
    uncovered = ExactRows(4, 64, ("F32", "IQ2_XXS"), ("IQ2_XXS",), (2, 4), None)
    assert uncovered.reduced and "do not cover IQ2_XXS" in uncovered.why
    differed = ExactRows(2, 64, ("Q4_K",), (), (2, 4), 4)
    assert differed.reduced and "4-token blocks differ" in differed.why
    assert differed.report()["why"] == differed.why


def test_weight_types_and_fingerprint_of_a_gguf(tmp_path) -> None:
    pytest.importorskip("gguf")
    from spec_decode.certify.tiny_gguf import tiny_weights, write_gguf

    weights = tiny_weights(seed=0, logit_scale=1.0)
    plain = write_gguf(tmp_path / "f32.gguf", weights)
    quantized = write_gguf(tmp_path / "q4.gguf", weights, quantized=True)
    assert weight_types(plain) == {"F32": len(weights)}
    matrices = sum(w.ndim == 2 for w in weights.values())
    assert weight_types(quantized) == {"F32": len(weights) - matrices, "Q4_0": matrices}
    assert fingerprint(plain) == fingerprint(plain)
    assert fingerprint(plain) != fingerprint(quantized)


def test_a_file_that_is_not_gguf_is_refused(tmp_path) -> None:
    path = tmp_path / "x.gguf"
    path.write_bytes(b"not a model")
    with pytest.raises(ValueError, match="not a GGUF"):
        weight_types(path)
