"""Token identity of long exact blocks on the packaged target: speculative output against
target-only output, prompt by prompt, for verification blocks of up to 49 tokens.

On the exact-rows build (``spec-decode build-kernels``, loaded from then on) every row of a
block is bitwise the one-token row, so greedy speculative decoding must emit target-only
decoding's tokens whatever k, and under the coupled rule so must sampled decoding for the same
seed. Per public prompt (HumanEval completions, MT-bench first turns,
code edits), through the engine ``generate`` and ``serve`` run, caches cold for every run:

- greedy: target-only; prompt lookup with a fixed k of 16, 32 and 48; the default auto policy;
- temperature 0.7, seed 3, coupled rule: target-only; prompt lookup with k = 48.

    python bench/exactness/exact_identity.py --per-category 3 --tokens 64 \\
        --out bench/results/exact_identity.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.machine import machine
from bench.lib.prompt_sets import sample
from spec_decode.backends.llamacpp.kernels import kernels_status
from spec_decode.core.sampling import SamplingParams
from spec_decode.serving.config import EngineConfig
from spec_decode.serving.engine import Engine
from spec_decode.serving.request import RequestOptions

GREEDY, SAMPLED = SamplingParams(temperature=0), SamplingParams(temperature=0.7)
SEED = 3


def variants(lookup: Engine, auto: Engine) -> list[tuple[str, Engine, SamplingParams, bool]]:
    """(name, engine, sampling, target_only) of every run of one prompt."""

    def fixed(k: int) -> Engine:
        return dataclasses.replace(lookup, config=dataclasses.replace(lookup.config, k=k), k=k)

    return [
        ("greedy target-only", lookup, GREEDY, True),
        *[(f"greedy lookup k={k}", fixed(k), GREEDY, False) for k in (16, 32, 48)],
        (f"greedy auto (k <= {auto.k})", auto, GREEDY, False),
        ("T=0.7 target-only", lookup, SAMPLED, True),
        ("T=0.7 lookup k=48", fixed(48), SAMPLED, False),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-category", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="bench/results/exact_identity.json")
    args = parser.parse_args()
    lookup = Engine.load(
        EngineConfig(draft="lookup", policy="fixed", k=16, threads=args.threads, rule="coupled")
    )
    auto = Engine.load(EngineConfig(threads=args.threads, rule="coupled"))
    status = kernels_status()
    print(status)
    rows = []
    for prompt in sample(args.per_category):
        ids = lookup.encode(prompt.text, raw=not prompt.chat)
        runs = {}
        for name, engine, sampling, target_only in variants(lookup, auto):
            engine.forget()
            seed = SEED if sampling.temperature > 0 else None
            request = engine.prepare(
                ids,
                RequestOptions(sampling=sampling, seed=seed, target_only=target_only),
                max_tokens=args.tokens,
            )
            done = engine.generate(request)
            runs[name] = {
                "tokens": done.tokens,
                "seconds": done.seconds,
                "target_passes": done.trace.target_passes,
                "tokens_per_pass": done.trace.tokens_per_pass,
            }
        greedy, sampled = runs["greedy target-only"], runs["T=0.7 target-only"]
        same = {
            name: run["tokens"] == (greedy if name.startswith("greedy") else sampled)["tokens"]
            for name, run in runs.items()
        }
        rows.append({"prompt": f"{prompt.category} {prompt.source_id}", "identical": same, **runs})
        print(
            prompt.category, prompt.source_id, {n: ("ok" if s else "DIFF") for n, s in same.items()}
        )
    names = list(rows[0]["identical"])
    summary = {n: sum(r["identical"][n] for r in rows) for n in names}
    result = {
        "machine": machine(),
        "kernels": status,
        "tokens": args.tokens,
        "threads": args.threads,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "identical_of": len(rows),
        "identical": summary,
        "prompts": rows,
    }
    out = Path(args.out)
    out.write_text(json.dumps(result, indent=1) + "\n")
    lines = [
        f"# Exact blocks on the packaged target ({status})",
        "",
        f"{len(rows)} public prompts, {args.tokens} tokens, {args.threads} threads, caches "
        f"cold every run; the coupled rule, seed {SEED} for T = 0.7.",
        "",
        "| variant | identical to target-only | target passes (all prompts) | tokens / pass |",
        "|---|---|---|---|",
    ]
    for name in names:
        passes = sum(r[name]["target_passes"] for r in rows)
        tokens = sum(len(r[name]["tokens"]) for r in rows)
        lines.append(f"| {name} | {summary[name]}/{len(rows)} | {passes} | {tokens / passes:.2f} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
