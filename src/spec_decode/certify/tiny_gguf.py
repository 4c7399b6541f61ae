"""Tiny random Llama-architecture GGUF files, written with ``gguf.GGUFWriter`` (no download, no
conversion; the ``gguf`` package of the ``hf`` extra): for the llama.cpp engines the auditor
runs (:mod:`~spec_decode.certify.engines_llamacpp`), the backend tests and the server tests.

The models have 2 layers of width 32 and a SentencePiece ("llama") vocabulary; weights are
float32, or Q4_0 (``quantized``), which takes the same repacked CPU kernels as the packaged Q4
models and so shows their batch-size dependence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

#: The backend tests' vocabulary: unknown, BOS, EOS, the word boundary and two letters.
TOKENS = ["<unk>", "<s>", "</s>", "\u2581", "a", "b"]
CONTEXT = 64
HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 32, 2, 4, 2, 64
_SPECIAL = 3  # <unk>, <s>, </s>


def tiny_weights(seed: int, logit_scale: float, vocab: int = len(TOKENS)) -> dict[str, np.ndarray]:
    """Random float32 tensors of a Llama block stack, named as llama.cpp expects them."""
    rng = np.random.default_rng(seed)

    def dense(rows: int, cols: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale / np.sqrt(cols)).astype(np.float32)

    kv = KV_HEADS * HIDDEN // HEADS
    weights = {
        "token_embd.weight": dense(vocab, HIDDEN, np.sqrt(HIDDEN)),
        "output_norm.weight": np.ones(HIDDEN, np.float32),
        "output.weight": dense(vocab, HIDDEN, logit_scale),
    }
    for i in range(LAYERS):
        weights |= {
            f"blk.{i}.attn_norm.weight": np.ones(HIDDEN, np.float32),
            f"blk.{i}.ffn_norm.weight": np.ones(HIDDEN, np.float32),
            f"blk.{i}.attn_q.weight": dense(HIDDEN, HIDDEN),
            f"blk.{i}.attn_k.weight": dense(kv, HIDDEN),
            f"blk.{i}.attn_v.weight": dense(kv, HIDDEN),
            f"blk.{i}.attn_output.weight": dense(HIDDEN, HIDDEN),
            f"blk.{i}.ffn_gate.weight": dense(FFN, HIDDEN),
            f"blk.{i}.ffn_up.weight": dense(FFN, HIDDEN),
            f"blk.{i}.ffn_down.weight": dense(HIDDEN, FFN),
        }
    return weights


def perturbed(weights: dict[str, np.ndarray], seed: int, noise: float) -> dict[str, np.ndarray]:
    """A copy with Gaussian noise of ``noise`` times each tensor's spread: a well-matched draft."""
    rng = np.random.default_rng(seed)
    return {
        name: (w + noise * w.std() * rng.standard_normal(w.shape)).astype(np.float32)
        for name, w in weights.items()
    }


def write_gguf(
    path: Path,
    weights: dict[str, np.ndarray],
    tokens: Sequence[str] = TOKENS,
    *,
    context: int = CONTEXT,
    chat_template: str | None = None,
    quantized: bool = False,
) -> Path:
    """A Llama-architecture GGUF with the SentencePiece vocabulary ``tokens`` (the first three
    are unknown, BOS and EOS; ``tokens[3]`` the word boundary)."""
    import gguf

    scores = [0.0] * _SPECIAL + [-1.0] + [-2.0] * (len(tokens) - _SPECIAL - 1)
    writer = llama_writer(path, tokens, scores, context=context)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    for name, tensor in weights.items():
        if quantized and tensor.ndim == 2:
            kind = gguf.GGMLQuantizationType.Q4_0
            writer.add_tensor(name, gguf.quants.quantize(tensor, kind), raw_dtype=kind)
        else:
            writer.add_tensor(name, tensor)
    return close_writer(writer, path)


def llama_writer(
    path: Path,
    tokens: Sequence[str],
    scores: Sequence[float],
    *,
    context: int,
    shape: tuple[int, int, int, int, int] = (HIDDEN, LAYERS, HEADS, KV_HEADS, FFN),
):
    """A ``gguf.GGUFWriter`` with the header of a Llama model of ``shape`` (hidden width,
    layers, heads, KV heads, feed-forward width) and the SentencePiece vocabulary ``tokens``
    (unknown, BOS and EOS first), ready for its tensors."""
    import gguf

    hidden, layers, heads, kv_heads, ffn = shape
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(context)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(list(tokens))
    writer.add_token_scores(list(scores))
    # unknown, control, control, then normal tokens, byte tokens (<0x41>) as such, and tokens
    # spelled <|...|> as control tokens, as Qwen's <|im_start|> and <|fim_prefix|> are
    kinds = [_kind(t) for t in tokens[_SPECIAL:]]
    writer.add_token_types([2, 3, 3, *kinds])
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)
    return writer


def _kind(token: str) -> int:
    """A token's llama.cpp type: byte (6), control (3) or normal (1)."""
    if re.fullmatch(r"<0x[0-9A-F]{2}>", token):
        return 6
    return 3 if re.fullmatch(r"<\|[^|]+\|>", token) else 1


def close_writer(writer, path: Path) -> Path:
    """Write everything ``writer`` holds to ``path`` and close it."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
