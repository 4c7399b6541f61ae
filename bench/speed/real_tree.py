"""Token trees on the Qwen2.5-Coder pair on this CPU: what a tree pass costs and whether it pays.

Part 1, pass cost: the target scores the prompt's last token plus N drafted tokens on a warm
cache, as a chain block (``score``) or as a tree (``score_tree``, one pass with a 4D attention
mask), median wall time over repetitions. The tree rows are also checked against scoring each
leaf's path as a plain block (max |difference| in log-probability).

Part 2, end to end: sampled generation (temperature 0.7) of ``--tokens`` tokens with target-only
decoding, chains and trees with the same number of drafted tokens, on the same loaded models in
shuffled order. Trees need sampling: at temperature 0 the draft row is one-hot, so siblings drawn
without replacement stop at one and with replacement are all the same token.

Writes bench/results/real_tree.json and real_tree.md. Run: python bench/speed/real_tree.py
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.handwritten import HANDWRITTEN_PROMPTS as PROMPTS
from bench.lib.machine import machine
from bench.lib.pair import load_transformers_pair
from bench.lib.results import write_results
from spec_decode.backends.prompts import encode_prompt
from spec_decode.backends.transformers import TransformersModel
from spec_decode.core.generate import generate_autoregressive
from spec_decode.core.randomness import NumpySource
from spec_decode.core.sampling import SamplingParams
from spec_decode.core.tree import TreeShape
from spec_decode.drafting.drafters import ModelDrafter
from spec_decode.drafting.speculative import generate_speculative, generate_tree
from spec_decode.drafting.tree_drafters import ModelTreeDrafter

TEMPERATURE = 0.7
CHAINS = (3, 6)
TREES = ((3,), (2, 1, 1), (3, 1), (2, 2), (3, 2, 1))


def pass_cost(
    target: TransformersModel, draft: TransformersModel, ids: list[int], reps: int
) -> dict[str, object]:
    """Median seconds of one target pass per block shape, and the tree-vs-path check."""
    sampling = SamplingParams(TEMPERATURE)
    rng = NumpySource(np.random.default_rng(0))
    trees = {
        shape: ModelTreeDrafter(draft, sampling).propose_tree(ids, TreeShape(shape), rng)
        for shape in TREES
    }
    chain_tokens, _ = ModelDrafter(draft, sampling).propose(ids, 15, rng)
    calls = {"1 token": lambda: target.next_dist(ids)}
    for k in (*CHAINS, 15):
        calls[f"chain block of {k}"] = lambda k=k: target.score(ids, chain_tokens[:k])
    for shape, tree in trees.items():
        calls[f"tree {TreeShape(shape)} ({tree.size} nodes)"] = lambda tree=tree: target.score_tree(
            ids, list(tree.tokens), list(tree.parents)
        )
    target.next_dist(ids)  # warm: the cache covers the prompt
    seconds: dict[str, list[float]] = {name: [] for name in calls}
    order = random.Random(0)
    for _ in range(reps):
        names = list(calls)
        order.shuffle(names)
        for name in names:
            start = time.perf_counter()
            calls[name]()
            seconds[name].append(time.perf_counter() - start)
    tree = trees[(3, 2, 1)]
    rows = np.log(target.score_tree(ids, list(tree.tokens), list(tree.parents)))
    worst = 0.0
    for node in range(tree.size):
        path = tree.path(node)
        reference = np.log(target.score(ids, path)[-1])
        worst = max(worst, float(np.max(np.abs(rows[node + 1] - reference))))
    return {
        "median_seconds": {name: statistics.median(s) for name, s in seconds.items()},
        "max_abs_logprob_diff_tree_vs_path": worst,
    }


def run(
    target: TransformersModel,
    draft: TransformersModel,
    ids: list[int],
    variant: str,
    tokens: int,
    seed: int,
) -> dict[str, object]:
    target.reset()
    draft.reset()
    sampling = SamplingParams(TEMPERATURE)
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    if variant == "target-only":
        trace = generate_autoregressive(target, ids, tokens, rng, sampling=sampling)
    elif variant.startswith("chain"):
        k = int(variant.split("=")[1])
        trace = generate_speculative(target, draft, ids, tokens, k, rng, sampling=sampling)
    else:
        widths = TreeShape.parse(variant.split()[1])
        trace = generate_tree(
            target,
            draft,
            ids,
            tokens,
            widths,
            rng,
            sampling=sampling,
            replacement="distinct" not in variant,
        )
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "tokens_per_second": len(trace.tokens) / seconds,
        "target_passes": trace.target_passes,
        "tokens_per_pass": trace.tokens_per_pass,
        "draft_calls": trace.draft_calls,
        "drafted": trace.proposed,
        "draft_seconds": trace.draft_seconds,
        "target_seconds": trace.target_seconds,
    }


def markdown(payload: dict) -> str:
    cost = payload["pass_cost"]["median_seconds"]
    base = cost["1 token"]
    load = payload["machine"]["load_average_start"][0]
    busy = (
        f"; load average {load:.1f} at start: other jobs shared the CPU, so the seconds and "
        "tokens/s below are not reliable, only the counts are"
        if load > 1.5
        else ""
    )
    lines = [
        "## Real pair: token trees on this CPU (`python bench/speed/real_tree.py`)",
        "",
        "Qwen2.5-Coder-1.5B target (fp16 weights) and 0.5B draft (int8) on "
        f"{payload['machine']['cpu']} ({payload['machine']['cores']} cores{busy}). Tree rows "
        "from one `score_tree` pass agree with scoring each path as a plain block to "
        f"{payload['pass_cost']['max_abs_logprob_diff_tree_vs_path']:.1e} in log-probability.",
        "",
        "Cost of one target pass (last prompt token + N drafted tokens, warm cache, median):",
        "",
        "| block | seconds | vs 1 token |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {s:.3f} | {s / base:.2f}x |" for name, s in cost.items()]
    lines += [
        "",
        f"End to end, temperature {TEMPERATURE}, {payload['tokens']} tokens per run, "
        f"{payload['reps']} seed(s) per prompt; medians over prompts and seeds:",
        "",
        "| variant | drafted / step | tokens / pass | draft calls / pass | tokens / s |",
        "|---|---|---|---|---|",
    ]
    summary = payload["summary"]
    for variant, runs in summary.items():
        lines.append(
            f"| {variant} | {runs['drafted_per_pass']:.1f} | {runs['tokens_per_pass']:.2f} | "
            f"{runs['draft_calls_per_pass']:.1f} | {runs['tokens_per_second']:.2f} |"
        )
    trees = [v for v in summary if v.startswith("tree")]
    best = max(trees, key=lambda v: summary[v]["tokens_per_pass"])
    fastest = max(summary, key=lambda v: summary[v]["tokens_per_second"])
    tree_cost = cost["tree 3,2,1 (15 nodes)"] / cost["chain block of 15"]
    lines += [
        "",
        f"At about 6 drafted tokens per step the best tree ({best}) makes "
        f"{summary[best]['tokens_per_pass']:.2f} tokens per pass against "
        f"{summary['chain k=6']['tokens_per_pass']:.2f} for the chain k=6; a pass over a 15-node "
        f"tree costs {tree_cost:.2f}x a 15-token chain block. Fastest in wall clock: {fastest} "
        f"({summary[fastest]['tokens_per_second']:.2f} tokens/s; target-only "
        f"{summary['target-only']['tokens_per_second']:.2f}).",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--cost-reps", type=int, default=7)
    parser.add_argument("--prompts", default="code completion,prose")
    args = parser.parse_args()
    target, draft, tokenizer, _ = load_transformers_pair()
    payload: dict[str, object] = {
        "machine": machine(),
        "tokens": args.tokens,
        "reps": args.reps,
    }
    prompts = {p: encode_prompt(tokenizer, PROMPTS[p], raw=False) for p in args.prompts.split(",")}
    payload["pass_cost"] = pass_cost(target, draft, prompts[next(iter(prompts))], args.cost_reps)
    print(json.dumps(payload["pass_cost"], indent=1), flush=True)

    variants = ["target-only", *(f"chain k={k}" for k in CHAINS)]
    for shape in TREES[1:4]:
        variants += [f"tree {TreeShape(shape)}", f"tree {TreeShape(shape)} distinct"]
    runs: dict[str, list[dict[str, object]]] = {v: [] for v in variants}
    order = random.Random(0)
    for seed in range(args.reps):
        for ids in prompts.values():
            order.shuffle(variants)
            for variant in variants:
                result = run(target, draft, ids, variant, args.tokens, seed)
                runs[variant].append(result)
                print(variant, {k: round(v, 3) for k, v in result.items()}, flush=True)
    payload["runs"] = runs
    payload["summary"] = {
        variant: {
            "tokens_per_pass": statistics.median(r["tokens_per_pass"] for r in rs),
            "drafted_per_pass": statistics.median(r["drafted"] / r["target_passes"] for r in rs),
            "draft_calls_per_pass": statistics.median(
                r["draft_calls"] / r["target_passes"] for r in rs
            ),
            "tokens_per_second": statistics.median(r["tokens_per_second"] for r in rs),
        }
        for variant, rs in sorted(runs.items())
    }
    write_results("real_tree", payload, lambda results: markdown(results) + "\n")


if __name__ == "__main__":
    main()
