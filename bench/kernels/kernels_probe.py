"""Find llama.cpp's batch-dependent ops: a token scored alone vs the same token inside a block.

For each block size B the script scores a prompt, then (reference) the block's first token alone,
then (block run, on a fresh cache) the whole block of B tokens in one ``llama_decode``. An eval
callback (``cb_eval``) sees every graph node as it is computed. In the block run, each node's row
for the first token is compared bitwise with the reference node and then *overwritten with the
reference values*, so every op downstream gets bitwise the inputs it had when the token was scored
alone: an op is reported as batch-dependent only if its own output changes (its inputs being
equal), not because an earlier op changed.  Run with ``LLAMA_CPP_LIB_PATH`` set to probe another
build.

    python bench/kernels/kernels_probe.py MODEL.gguf --blocks 2,3,4,5,8,16,64 --json out.json
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.ggml import F32, GgmlTensor, ggml_base, library_folder
from spec_decode.backends.llamacpp.library import llama_cpp
from spec_decode.backends.llamacpp.raw import RawContext


def view(t: GgmlTensor) -> np.ndarray | None:
    """The tensor's data as a strided float32 array indexed [ne3, ne2, ne1, ne0] (no copy)."""
    if t.type != F32 or not t.data:
        return None
    ne = list(t.ne)
    nb = list(t.nb)
    span = sum((n - 1) * s for n, s in zip(ne, nb, strict=True)) + 4
    buf = (ctypes.c_char * span).from_address(t.data)
    flat = np.frombuffer(buf, dtype=np.uint8)
    return np.lib.stride_tricks.as_strided(flat.view(np.float32), shape=ne[::-1], strides=nb[::-1])


class Recorder:
    """cb_eval: capture (reference) or compare-and-patch (block) every f32 node."""

    def __init__(self) -> None:
        self.mode = "off"
        self.ref: dict[str, tuple[np.ndarray, str]] = {}
        self.report: list[dict] = []
        self.counts: collections.Counter = collections.Counter()
        self.n_kv_pos = 0  # positions (0..P) that the first token may attend to
        self.cb = llama_cpp.ggml_backend_sched_eval_callback(self._cb)

    def start(self, mode: str) -> None:
        self.mode = mode
        self.counts = collections.Counter()
        if mode == "ref":
            self.ref = {}
        if mode == "block":
            self.report = []

    def _cb(self, tp, ask, _user):
        if self.mode == "off":
            return not ask
        if ask:
            return True
        t = ctypes.cast(tp, ctypes.POINTER(GgmlTensor)).contents
        name = t.name.decode()
        self.counts[name] += 1
        key = f"{name}#{self.counts[name]}"
        arr = view(t)
        if arr is None:
            return True
        op = ggml_base().ggml_op_desc(ctypes.byref(t)).decode()
        srcs = [t.src[i].contents.name.decode() for i in range(10) if t.src[i]]
        if self.mode == "ref":
            self.ref[key] = (np.array(arr), op)
            return True
        if key not in self.ref:
            self.report.append({"node": key, "op": op, "srcs": srcs, "status": "no reference"})
            return True
        ref, _ = self.ref[key]
        sl = self._row_slice(arr.shape, ref.shape)
        if sl is None:
            return self._shape_mismatch(key, op, srcs, arr, ref)
        if name.startswith("kq-"):
            # attention scores [head, token, cell]: cells after the first token's own position are
            # other block tokens (masked to -inf next): compare and patch only cells 0..P
            sl = (*sl[:-1], slice(0, self.n_kv_pos))
        mine, theirs = arr[sl], ref[tuple(slice(0, n) for n in arr[sl].shape)]
        if mine.shape != theirs.shape:
            return self._shape_mismatch(key, op, srcs, arr, ref)
        eq = np.array_equal(mine.view(np.uint32), theirs.view(np.uint32))
        with np.errstate(invalid="ignore"):
            d = np.abs(mine.astype(np.float64) - theirs)
            diff = float(np.nanmax(np.where(np.isfinite(d), d, 0))) if d.size else 0.0
        self.report.append(
            {
                "node": key,
                "op": op,
                "srcs": srcs,
                "equal": bool(eq),
                "max_abs_diff": diff,
                "shape": list(arr.shape),
            }
        )
        if not eq:
            arr[sl] = theirs  # patch: downstream ops see the one-token inputs
        return True

    def _shape_mismatch(
        self, key: str, op: str, srcs: list, arr: np.ndarray, ref: np.ndarray
    ) -> bool:
        """Record that node ``key`` cannot be compared row for row, and let the graph go on."""
        self.report.append(
            {
                "node": key,
                "op": op,
                "srcs": srcs,
                "status": "shape",
                "shape": list(arr.shape),
                "ref_shape": list(ref.shape),
            }
        )
        return True

    def _row_slice(self, shape, ref_shape):
        """Index of the first token's part of a block tensor, given the one-token tensor."""
        if len(shape) != len(ref_shape):
            return None
        sl = []
        for n, r in zip(shape, ref_shape, strict=True):
            if n == r:
                sl.append(slice(None))
            elif r == 1:
                sl.append(slice(0, 1))  # token axis: row 0 is the first token
            elif n > r:
                sl.append(slice(0, r))  # padded axis (e.g. the mask's token rows)
            else:
                return None
        return tuple(sl)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--blocks", default="2,3,4,5,6,7,8,12,16,32,64")
    ap.add_argument("--prompt-len", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()

    rec = Recorder()
    raw = RawContext(args.model, threads=args.threads, eval_callback=rec.cb)
    rng = np.random.default_rng(0)
    blocks = [int(b) for b in args.blocks.split(",")]
    tokens = rng.integers(100, min(raw.n_vocab, 30000), size=args.prompt_len + max(blocks))
    tokens = tokens.tolist()
    prompt = tokens[: args.prompt_len]
    decode = raw.decode

    def fresh_prompt():
        raw.forget_from(0)
        rec.start("off")
        decode(prompt, 0)

    rec.n_kv_pos = args.prompt_len + 1
    fresh_prompt()
    rec.start("ref")
    decode(tokens[args.prompt_len : args.prompt_len + 1], args.prompt_len)
    results = {}
    for B in blocks:
        fresh_prompt()
        rec.start("block")
        decode(tokens[args.prompt_len : args.prompt_len + B], args.prompt_len)
        results[B] = rec.report
        bad = [r for r in rec.report if r.get("equal") is False]
        other = [r for r in rec.report if "equal" not in r]
        ops = collections.Counter((r["node"].split("-")[0].split("#")[0], r["op"]) for r in bad)
        print(
            f"B={B}: {len(rec.report)} nodes, {len(bad)} differ, {len(other)} unchecked", flush=True
        )
        for (name, op), n in sorted(ops.items()):
            worst = max(
                r["max_abs_diff"]
                for r in bad
                if r["node"].split("-")[0].split("#")[0] == name and r["op"] == op
            )
            print(f"    {name:24s} {op:12s} x{n:3d}  max |diff| {worst:.3g}")
        for r in other[:5]:
            print("    unchecked:", r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "build": llama_cpp.llama_print_system_info().decode(),
                    "lib_dir": library_folder(),
                    "results": results,
                },
                f,
            )


if __name__ == "__main__":
    main()
