"""Tiny random K-quant GGUFs for the exact-rows tests, laid out like the packaged Q4_K_M target
(Llama architecture, 2 layers, width 256, 512-token vocabulary), written with
``gguf.GGUFWriter`` from random blocks: Q4_K projections (repacked 8x8 on AVX2: the one-row GEMV
and the 4-row GEMM), Q6_K ``attn_v``, ``ffn_down`` (layer 0) and output (the vec_dot below 8
rows, the tiled kernel from 8; on AVX-512 VNNI the 1-4-row kernel below 48, the tiled one from
48). gguf-py has no K-quant quantizer; random blocks with moderate
scales are valid weights all the same. ``projection`` makes the projections another type: Q5_K,
Q3_K, IQ4_XS (vec_dot below 8 rows, the tiled kernel from 8) and Q2_K (repacked on AVX-512), the
types gguf-py quantizes itself (Q8_0, Q5_1, Q5_0, Q4_1, Q4_0, F16, BF16: random weights
quantized), all of which the exact-rows kernels cover, or IQ2_XXS, which they do not: the
negative control of the per-model promise.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from spec_decode.certify.tiny_gguf import close_writer, llama_writer

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, VOCAB = 256, 2, 4, 2, 512, 512
QK_K = 256
Q4_K, Q5_K, Q6_K = (gguf.GGMLQuantizationType[name] for name in ("Q4_K", "Q5_K", "Q6_K"))
Q3_K, Q2_K, IQ4_XS, IQ2_XXS = (
    gguf.GGMLQuantizationType[name] for name in ("Q3_K", "Q2_K", "IQ4_XS", "IQ2_XXS")
)


def _half(n: int, value: float) -> np.ndarray:
    """``n`` fp16 copies of ``value`` as bytes, one row of 2 per block."""
    return np.full(n, value, np.float16).view(np.uint8).reshape(n, 2)


def _random_blocks(rng: np.random.Generator, rows: int, cols: int, qtype) -> np.ndarray:
    """Random bytes for ``rows`` x ``cols`` weights of ``qtype``, one row of bytes per block."""
    n = rows * cols // QK_K
    block_bytes = gguf.GGML_QUANT_SIZES[qtype][1]
    return rng.integers(0, 256, size=(n, block_bytes), dtype=np.uint8)


def q4_k(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Random Q4_K blocks (d, dmin: fp16; 12 bytes of 6-bit scales and mins; 128 bytes of
    nibbles) whose weights have a spread of about 1/sqrt(cols)."""
    n = rows * cols // QK_K
    blocks = np.zeros((n, 144), np.uint8)
    blocks[:, 0:2] = _half(n, 1.0 / (8 * 32 * np.sqrt(cols)))
    blocks[:, 2:4] = _half(n, 1.0 / (8 * 32 * np.sqrt(cols)) * 7.5 * 32 / 24)
    scales = rng.integers(16, 48, size=(n, 16))  # 8 scales then 8 mins, 6 bits each
    packed = np.zeros((n, 12), np.uint8)  # the Q4_K 12-byte scale layout (ggml-quants.c)
    for j in range(8):
        sc, mn = scales[:, j], scales[:, 8 + j]
        if j < 4:
            packed[:, j] = sc
            packed[:, j + 4] = mn
        else:
            packed[:, j + 4] = (sc & 0xF) | ((mn & 0xF) << 4)
            packed[:, j - 4] |= ((sc >> 4) << 6).astype(np.uint8)
            packed[:, j] |= ((mn >> 4) << 6).astype(np.uint8)
    blocks[:, 4:16] = packed
    blocks[:, 16:] = rng.integers(0, 256, size=(n, 128), dtype=np.uint8)
    return blocks.reshape(rows, cols // QK_K * 144)


def q5_k(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Random Q5_K blocks: Q4_K's header (d, dmin, 12 bytes of scales and mins), then 32 bytes
    of high bits, then Q4_K's 128 bytes of nibbles."""
    low = q4_k(rng, rows, cols).reshape(-1, 144)
    high = rng.integers(0, 256, size=(len(low), 32), dtype=np.uint8)
    return np.concatenate([low[:, :16], high, low[:, 16:]], axis=1).reshape(rows, -1)


def q6_k(rng: np.random.Generator, rows: int, cols: int, spread: float = 1.0) -> np.ndarray:
    """Random Q6_K blocks (128 bytes low nibbles, 64 bytes high bits, 16 int8 scales, fp16 d)."""
    n = rows * cols // QK_K
    blocks = np.zeros((n, 210), np.uint8)
    blocks[:, :192] = rng.integers(0, 256, size=(n, 192), dtype=np.uint8)
    blocks[:, 192:208] = rng.integers(-60, 60, size=(n, 16)).astype(np.int8).view(np.uint8)
    blocks[:, 208:210] = _half(n, spread / (60 * 18 * np.sqrt(cols)))
    return blocks.reshape(rows, cols // QK_K * 210)


def q3_k(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Random Q3_K blocks (32 bytes of high bits, 64 of 2-bit codes, 12 of 6-bit scales stored
    +32, fp16 d): weights d * (scale - 32) * q with q in -4..3."""
    blocks = _random_blocks(rng, rows, cols, Q3_K)
    blocks[:, 108:110] = _half(len(blocks), 1.0 / (16 * 2.5 * np.sqrt(cols)))
    return blocks.reshape(rows, -1)


def q2_k(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Random Q2_K blocks (16 bytes of 4-bit scale and min pairs, 64 of 2-bit codes, fp16 d
    and dmin): weights d * scale * q - dmin * min with q in 0..3."""
    blocks = _random_blocks(rng, rows, cols, Q2_K)
    d = 1.0 / (8 * 1.5 * np.sqrt(cols))
    blocks[:, 80:82] = _half(len(blocks), d)
    blocks[:, 82:84] = _half(len(blocks), 1.5 * d)
    return blocks.reshape(rows, -1)


def iq4_xs(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Random IQ4_XS blocks (fp16 d, 6-bit scales stored +32 in 2 + 4 bytes, 128 bytes of
    4-bit indexes into the non-linear table of -127..113)."""
    blocks = _random_blocks(rng, rows, cols, IQ4_XS)
    blocks[:, 0:2] = _half(len(blocks), 1.0 / (16 * 64 * np.sqrt(cols)))
    return blocks.reshape(rows, -1)


def iq2_xxs(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Random IQ2_XXS blocks (fp16 d, then per 32 weights four 8-bit grid indexes, four 7-bit
    sign patterns and a 4-bit scale: every byte pattern is a valid block)."""
    blocks = _random_blocks(rng, rows, cols, IQ2_XXS)
    blocks[:, 0:2] = _half(len(blocks), 1.0 / (4 * 25 * np.sqrt(cols)))
    return blocks.reshape(rows, -1)


def quantized(qtype: gguf.GGMLQuantizationType):
    """A generator of ``qtype`` weights that gguf-py quantizes: random weights with a spread of
    about 1/sqrt(cols), quantized."""

    def make(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
        dense = rng.standard_normal((rows, cols)).astype(np.float32) / np.sqrt(cols)
        return gguf.quants.quantize(dense, qtype)

    return make


#: the types gguf-py quantizes that the exact-rows kernels cover
QUANTIZED = tuple(
    gguf.GGMLQuantizationType[name]
    for name in ("Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0", "F16", "BF16")
)
#: the generator of each type the projections can take
PROJECTIONS = {Q4_K: q4_k, Q5_K: q5_k, Q3_K: q3_k, Q2_K: q2_k, IQ4_XS: iq4_xs, IQ2_XXS: iq2_xxs}
PROJECTIONS.update({qtype: quantized(qtype) for qtype in QUANTIZED})


def write_kquant_gguf(
    path: Path, seed: int = 0, projection: str = "Q4_K", output: str = "Q6_K"
) -> Path:
    """The model at ``path``: its attention and feed-forward projections of type
    ``projection`` and its output layer of type ``output`` (Q6_K or a key of
    :data:`PROJECTIONS`), the rest laid out as in a Q4_K_M file."""
    rng = np.random.default_rng(seed)
    kv = KV_HEADS * HIDDEN // HEADS
    tokens = ["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(VOCAB - 3)]
    shape = (HIDDEN, LAYERS, HEADS, KV_HEADS, FFN)
    writer = llama_writer(path, tokens, [0.0] * VOCAB, context=256, shape=shape)
    proj_type = gguf.GGMLQuantizationType[projection]
    proj = PROJECTIONS[proj_type]

    def add(name: str, data: np.ndarray, rows: int, cols: int, qtype) -> None:
        block, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
        assert data.shape[0] == rows and data.nbytes == rows * cols // block * block_bytes
        writer.add_tensor(name, data, raw_dtype=qtype)  # bytes per row; gguf derives the shape

    add("token_embd.weight", q4_k(rng, VOCAB, HIDDEN), VOCAB, HIDDEN, Q4_K)
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, np.float32))
    out_type = gguf.GGMLQuantizationType[output]
    out = (
        q6_k(rng, VOCAB, HIDDEN, spread=4.0)
        if out_type == Q6_K
        else PROJECTIONS[out_type](rng, VOCAB, HIDDEN)
    )
    add("output.weight", out, VOCAB, HIDDEN, out_type)
    for i in range(LAYERS):
        mixed = Q6_K if i == 0 else proj_type  # *_K_M: some attn_v and ffn_down stay Q6_K
        make = q6_k if i == 0 else proj
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(HIDDEN, np.float32))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(HIDDEN, np.float32))
        add(f"blk.{i}.attn_q.weight", proj(rng, HIDDEN, HIDDEN), HIDDEN, HIDDEN, proj_type)
        add(f"blk.{i}.attn_k.weight", proj(rng, kv, HIDDEN), kv, HIDDEN, proj_type)
        add(f"blk.{i}.attn_v.weight", make(rng, kv, HIDDEN), kv, HIDDEN, mixed)
        add(f"blk.{i}.attn_output.weight", proj(rng, HIDDEN, HIDDEN), HIDDEN, HIDDEN, proj_type)
        add(f"blk.{i}.ffn_gate.weight", proj(rng, FFN, HIDDEN), FFN, HIDDEN, proj_type)
        add(f"blk.{i}.ffn_up.weight", proj(rng, FFN, HIDDEN), FFN, HIDDEN, proj_type)
        add(f"blk.{i}.ffn_down.weight", make(rng, HIDDEN, FFN), HIDDEN, FFN, mixed)
    return close_writer(writer, path)
