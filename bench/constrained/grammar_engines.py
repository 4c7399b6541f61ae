"""Grammar engines for JSON-schema-constrained decoding, on the real Qwen2.5 vocabulary (151,936).

Measures xgrammar, llguidance and outlines-core with two grammars, (a) any JSON object (OpenAI
``response_format: json_object``) and (b) a function call's arguments schema:

1. tokenizer-info build time (once per engine) and grammar compile time (to a ready matcher);
2. the next-token mask over the full vocabulary at every position of a valid ~150-token document
   (HF-tokenized, walked mask -> advance, EOS last): the first walk on a fresh matcher (cold), then
   the median/p90 per position and the document total over warm walks (after ``reset``);
3. rollback: the API, the cost of rolling back 10 and 64 tokens (and of advancing 10), a check at
   every position that advance 10 + rollback 10 gives a bitwise-identical next mask, and the cost
   of the alternative, copying the matcher state (fork / deep copy);
4. the mask as a numpy bool array of length vocab: the packed-bitmask fill plus the unpacking.

Medians of ``time.perf_counter`` after a warm-up; each engine/grammar is timed once no
``cmake|ninja|cc1plus|pytest`` process runs (15 minutes of waiting at most, in all). Writes
``bench/results/grammar_engines.{json,md}`` (the .md keeps its hand-written "## Recommendation"
section). Run from the repository root, in a scratch venv (xgrammar pins torch and triton):

    python3 -m venv /tmp/gram-venv && /tmp/gram-venv/bin/pip install torch==2.13.0
    /tmp/gram-venv/bin/pip install xgrammar==0.2.9 llguidance==1.9.1 outlines-core==0.2.14 \\
        transformers==5.24.0 gguf tokenizers numpy
    /tmp/gram-venv/bin/python bench/constrained/grammar_engines.py [--walks 6] [--compiles 3]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from argparse import Namespace
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.results import RESULTS

GGUF = Path("/root/.cache/spec-decode/models/gguf/qwen2.5-coder-1.5b.gguf")
KEEP = "## Recommendation"  # this section of the .md is written by hand and kept across reruns
Schema = dict[str, Any]
BUSY = "cmake|ninja|cc1plus|pytest"  # processes that would compete for the 2 cores
NOT_IN_TABLE = ("rollback_api", "copy_api")
PACKAGES = ("xgrammar", "llguidance", "outlines_core", "transformers", "tokenizers", "torch")
ARGS = {"path": "string", "line": "integer", "replace": "string"}
ARGS_SCHEMA = {"type": "object", "properties": {k: {"type": t} for k, t in ARGS.items()}}
ARGS_SCHEMA |= {"required": [*ARGS], "additionalProperties": False}
CODE = (
    "    def rollback(self, n: int) -> None:\n"
    '        """Undo the last n tokens of the draft (the \\"rejected\\" suffix)."""\n'
    "        if n > len(self._states) or n < 0:\n"
    '            raise ValueError(f"cannot roll back {n} of {len(self._states)} tokens")\n'
    "        del self._states[len(self._states) - n :]\n"
    "        self._mask_cache.pop(self.position, None)\n"
    "        self.position -= n  # the next mask is the one cached before the draft\n"
    "        return None\n"
)
PATH = "src/spec_decode/grammar/matcher.py"
CALL = {"path": PATH, "line": 128, "replace": CODE}
DOC_OBJECT = {"name": "apply_patch", "arguments": CALL, "dry_run": False, "tags": ["fix"]}
GRAMMARS = {"json_object": ({"type": "object"}, DOC_OBJECT), "function_args": (ARGS_SCHEMA, CALL)}


def byte_decoder() -> dict[str, int]:
    """GPT-2 byte-level BPE: the printable character standing for each byte, inverted."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    shifted = [b for b in range(256) if b not in keep]
    return {chr(b): b for b in keep} | {chr(256 + i): b for i, b in enumerate(shifted)}


@dataclass(frozen=True)
class Engine:
    """One grammar engine behind a common interface; matchers are the engine's own objects, and
    every one has ``reset()``."""

    name: str
    rollback_api: str
    copy_api: str
    matcher: Callable[[dict[str, Any]], Any]  # schema -> a ready matcher
    fill: Callable[[Any, np.ndarray], object]  # packed int32 bitmask of shape (1, vocab/32)
    advance: Callable[[Any, int], object]  # False or an exception on a disallowed token
    rollback: Callable[[Any, int], object]
    copy: Callable[[Any], Any]


def xgrammar_engine(tok: Any) -> Engine:
    import xgrammar as xgr

    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok))
    compiler = xgr.GrammarCompiler(info, max_threads=os.cpu_count() or 1, cache_enabled=False)
    return Engine(
        "xgrammar",
        "GrammarMatcher.rollback(n)",
        "GrammarMatcher.fork()",
        matcher=lambda s: xgr.GrammarMatcher(
            compiler.compile_json_schema(json.dumps(s), strict_mode=False)
        ),
        fill=lambda m, bm: m.fill_next_token_bitmask(bm),  # numpy through DLPack
        advance=lambda m, t: m.accept_token(t),
        rollback=lambda m, n: m.rollback(n),
        copy=lambda m: m.fork(),
    )


def llguidance_engine(tok: Any) -> Engine:
    import llguidance
    import llguidance.hf

    lltok = llguidance.hf.from_tokenizer(tok, n_vocab=len(tok))

    def matcher(schema: dict[str, Any]) -> Any:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema))
        m = llguidance.LLMatcher(lltok, grammar, log_level=0)
        assert not m.is_error(), m.get_error()
        return m

    def rollback(m: Any, n: int) -> None:
        if not m.rollback(n):
            raise RuntimeError(f"llguidance could not roll back {n} tokens: {m.get_error()}")

    return Engine(
        "llguidance",
        "LLMatcher.rollback(n)",
        "LLMatcher.deep_copy()",
        matcher,
        fill=lambda m, bm: m.unsafe_compute_mask_ptr(bm.ctypes.data, bm.nbytes),
        advance=lambda m, t: m.consume_token(t),
        rollback=rollback,
        copy=lambda m: m.deep_copy(),
    )


def outlines_engine(tok: Any) -> Engine:
    import outlines_core as oc

    special = set(tok.all_special_ids) | set(tok.added_tokens_decoder)
    table, mapping = byte_decoder(), {}
    for i, token in enumerate(tok.convert_ids_to_tokens(list(range(len(tok))))):
        if i not in special:
            mapping.setdefault(bytes(table[c] for c in token), []).append(i)
    eos = tok.eos_token_id
    voc = oc.Vocabulary(eos, mapping)
    return Engine(
        "outlines-core",
        "Guide.rollback_state(n), n <= Guide(max_rollback=64)",
        "copy.deepcopy(Guide): pickles the whole Index",
        matcher=lambda s: oc.Guide(
            oc.Index(oc.json_schema.build_regex_from_schema(json.dumps(s)), voc), max_rollback=64
        ),
        fill=lambda m, bm: m.write_mask_into(bm.ctypes.data, bm.size, 4),
        # advance raises on a disallowed token, and on EOS even in a final state (mask allows it)
        advance=lambda m, t: m.is_finished() if t == eos else m.advance(t, return_tokens=False),
        rollback=lambda m, n: m.rollback_state(n),
        copy=copy.deepcopy,
    )


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def unpack(bitmask: np.ndarray, vocab: int) -> np.ndarray:
    """The packed int32 bitmask (bit i of word i//32 = token i) as a bool array of length vocab."""
    return np.unpackbits(bitmask.view(np.uint8), bitorder="little")[:vocab].view(np.bool_)


def fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def bench(eng: Engine, schema: Schema, ids: list[int], vocab: int, args: Namespace) -> Schema:
    us = 1e6
    eng.matcher(schema)  # warm-up
    compile_s = statistics.median(
        timed(lambda: eng.matcher(schema))[0] for _ in range(args.compiles)
    )
    m = eng.matcher(schema)
    bm = np.zeros((1, (vocab + 31) // 32), dtype=np.int32)
    per_pos: list[list[float]] = [[] for _ in ids]
    unpack_s: list[float] = []
    allowed: list[int] = []
    cold_total = first_mask = 0.0
    for walk in range(args.walks + 1):
        m.reset()
        for pos, token in enumerate(ids):
            dt, _ = timed(lambda: eng.fill(m, bm))
            du, mask = timed(lambda: unpack(bm, vocab))
            assert mask[token], f"{eng.name}: token {token} at {pos} masked out"
            if walk == 0:
                cold_total += dt
                first_mask = first_mask or dt
                allowed.append(int(mask.sum()))
            else:
                per_pos[pos].append(dt)
                unpack_s.append(du)
            assert eng.advance(m, token) is not False, (
                f"{eng.name}: token {token} at {pos} rejected"
            )
    masks = [statistics.median(p) for p in per_pos]
    roll: dict[int, list[float]] = {10: [], 64: []}
    adv10: list[float] = []
    identical = checked = 0
    before, after = bm.copy(), bm.copy()
    for n in roll:
        m.reset()
        for pos in range(len(ids) - n):
            eng.fill(m, before)
            da, _ = timed(lambda p=pos, k=n: [eng.advance(m, t) for t in ids[p : p + k]])
            dr, _ = timed(lambda k=n: eng.rollback(m, k))
            eng.fill(m, after)
            roll[n].append(dr)
            if n == 10:
                adv10.append(da)
                checked += 1
                identical += int(np.array_equal(before, after))
            eng.advance(m, ids[pos])
    m.reset()
    for token in ids[: len(ids) // 2]:
        eng.advance(m, token)
    eng.copy(m)
    copy_s = statistics.median(timed(lambda: eng.copy(m))[0] for _ in range(3))
    return {
        "doc_tokens": len(ids),
        "compile_ms": compile_s * 1e3,
        "first_mask_us": first_mask * us,
        "cold_walk_ms": cold_total * 1e3,
        "mask_median_us": statistics.median(masks) * us,
        "mask_p90_us": float(np.percentile(masks, 90)) * us,
        "warm_walk_ms": sum(masks) * 1e3,
        "unpack_median_us": statistics.median(unpack_s) * us,
        "bool_mask_median_us": (statistics.median(masks) + statistics.median(unpack_s)) * us,
        "allowed_tokens_median": int(statistics.median(allowed)),
        "rollback_api": eng.rollback_api,
        "advance10_median_us": statistics.median(adv10) * us,
        "rollback10_median_us": statistics.median(roll[10]) * us,
        "rollback64_median_us": statistics.median(roll[64]) * us,
        "rollback_identical": f"{identical}/{checked}",
        "copy_api": eng.copy_api,
        "copy_median_us": copy_s * us,
    }


def wait_for_quiet(deadline: float) -> bool:
    """Wait (polling every 20 s, until ``deadline`` on the monotonic clock) while a C++ build or
    a test run goes on, as either would skew the timings; True when none runs."""
    while subprocess.run(["pgrep", "-f", BUSY], capture_output=True).stdout:
        if time.monotonic() > deadline:
            return False
        time.sleep(20)
    return True


def machine() -> dict[str, Any]:
    cpu = re.search(r"model name\s*:\s*(.+)", Path("/proc/cpuinfo").read_text())
    return {
        "cpu": cpu.group(1) if cpu else platform.processor(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "packages": {p: version(p) for p in (*PACKAGES, "numpy", "gguf")},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--walks", type=int, default=6, help="warm walks of each document")
    parser.add_argument("--compiles", type=int, default=3, help="timed compiles per grammar")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    load_s, tok = timed(
        lambda: AutoTokenizer.from_pretrained(str(GGUF.parent), gguf_file=GGUF.name)
    )
    deadline = time.monotonic() + 900  # 15 minutes of waiting at most, over the whole run
    quiet = wait_for_quiet(deadline)
    facts = machine() | {"quiet": quiet, "loadavg_at_start": os.getloadavg(), "vocab": len(tok)}
    facts |= {"eos": tok.eos_token_id, "hf_tokenizer_load_s": load_s}
    docs = {
        g: [*tok.encode(json.dumps(doc), add_special_tokens=False), tok.eos_token_id]
        for g, (_, doc) in GRAMMARS.items()
    }
    results: dict[str, Any] = {"machine": facts, "tokenizer_info_s": {}, "runs": {}}
    for build in (xgrammar_engine, llguidance_engine, outlines_engine):
        info_s, eng = timed(lambda b=build: b(tok))
        results["tokenizer_info_s"][eng.name] = info_s
        for grammar, (schema, _) in GRAMMARS.items():
            quiet &= wait_for_quiet(deadline)
            run = bench(eng, schema, docs[grammar], len(tok), args)
            results["runs"][f"{eng.name}/{grammar}"] = run
            print(f"{eng.name}/{grammar}: {json.dumps(run)}", flush=True)
    facts |= {"quiet": quiet, "loadavg_at_end": os.getloadavg()}
    runs = results["runs"]
    lines = ["| metric | " + " | ".join(runs) + " |", "|---" * (len(runs) + 1) + "|"]
    for key in (k for k in run if k not in NOT_IN_TABLE):
        lines.append(f"| {key} | " + " | ".join(fmt(r[key]) for r in runs.values()) + " |")
    info = ", ".join(f"{k} {v:.2f} s" for k, v in results["tokenizer_info_s"].items())
    table = "\n".join(lines) + f"\n\nTokenizer-info build: {info}.\n"
    print(table)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "grammar_engines.json").write_text(json.dumps(results, indent=2) + "\n")
    md = RESULTS / "grammar_engines.md"
    old = md.read_text() if md.exists() else ""
    kept = old[old.index(KEEP) :] if KEEP in old else f"{KEEP}\n\n(to be written)\n"
    md.write_text(
        f"# Grammar engines on the Qwen2.5 vocabulary ({len(tok)} tokens)\n\n"
        f"{facts['cpu']}, {facts['cores']} cores, quiet={quiet}; "
        f"`bench/constrained/grammar_engines.py`.\n\n{table}\n{kept}"
    )


if __name__ == "__main__":
    main()
