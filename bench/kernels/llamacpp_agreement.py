"""The llama.cpp backend on real GGUF models: per-call costs, block vs one-token agreement, trees.

Prints, for the target (and the draft, if given):

* costs: median seconds of ``llama_decode`` for one token and for a 5-token block (the last
  committed token plus 4 drafts), and of the probability computation per row;
* agreement: a greedy continuation is scored one token per call, then again in blocks of
  1..8 tokens; per block size, how many rows are bitwise equal to the one-token rows, the largest
  |difference| of a log-probability and the largest total variation distance;
* tree: the rows of one ``score_tree`` call against one-token scoring of each node's path;
* end to end (with a draft): greedy target-only vs greedy speculative (k = 2 and 4) output,
  tokens/s.

Run: PYTHONPATH=src python bench/kernels/llamacpp_agreement.py [--target PATH] [--draft PATH]
[--threads N]. Timings are only meaningful on an otherwise idle machine (the 1-minute load average
is printed alongside).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np

from spec_decode import SamplingParams, generate_autoregressive, generate_speculative
from spec_decode.backends.llamacpp import LlamaCppModel, load_tokenizer

MODELS = Path.home() / ".cache/spec-decode/models/gguf"
PROMPTS = [
    "def fibonacci(n):\n    ",
    "import numpy as np\n\n\ndef moving_average(values, window):\n",
    "The three most important ideas in thermodynamics are",
]
GREEDY = SamplingParams(temperature=0)


def costs(model: LlamaCppModel, prompt: list[int], repeats: int = 15) -> dict[str, float]:
    """Median seconds: one-token decode, 5-token block decode, probabilities per row."""
    rng = np.random.default_rng(0)
    model.reset()
    context = list(prompt)
    model.next_dist(context)
    one_token, block, per_row = [], [], []
    for _ in range(repeats):
        context.append(int(rng.integers(model.vocab_size)))
        forward_before = model.stats.forward_s
        model.next_dist(context)  # feeds the one new token
        one_token.append(model.stats.forward_s - forward_before)
    for _ in range(repeats):
        drafts = rng.integers(model.vocab_size, size=4).tolist()
        forward_before, softmax_before = model.stats.forward_s, model.stats.softmax_s
        model.score(context, drafts)  # feeds the last committed token and 4 drafts
        block.append(model.stats.forward_s - forward_before)
        per_row.append((model.stats.softmax_s - softmax_before) / 5)
    return {
        "one_token_s": statistics.median(one_token),
        "block5_s": statistics.median(block),
        "probabilities_per_row_s": statistics.median(per_row),
    }


def greedy_rows(model: LlamaCppModel, prompt: list[int], n: int) -> tuple[list[int], np.ndarray]:
    """A greedy continuation scored one token per call, and its n + 1 rows."""
    model.reset()
    tokens: list[int] = []
    rows = []
    for _ in range(n + 1):
        rows.append(model.next_dist(prompt + tokens))
        tokens.append(int(np.argmax(rows[-1])))
    return tokens[:n], np.stack(rows)


def compare(block: np.ndarray, one: np.ndarray) -> tuple[int, float, float]:
    """Bitwise-equal rows, max |log-probability difference| (where both > 0), max TV."""
    both = (block > 0) & (one > 0)
    logdiff = np.abs(np.log(np.where(both, block, 1.0)) - np.log(np.where(both, one, 1.0)))
    tv = 0.5 * np.abs(block - one).sum(axis=1)
    return int(np.all(block == one, axis=1).sum()), float(logdiff.max()), float(tv.max())


def agreement(model: LlamaCppModel, prompt: list[int], starts: int = 4) -> list[tuple]:
    """Per block size 1..8: rows compared, bitwise equal, max |d log p|, max TV, and the median
    seconds of the block's ``llama_decode``.

    Keys and values written by a block differ from one-token ones as much as its logits do, so
    each block is scored on a cache built one token at a time (as the reference was): the cache
    is rebuilt per block size and the starts are visited from the last, so trimming back to an
    earlier start removes every block-written entry.
    """
    tokens, one = greedy_rows(model, prompt, starts + 8)
    table = []
    for size in range(1, 9):
        greedy_rows(model, prompt, starts)  # one-token cache up to prompt + tokens[:starts]
        equal, worst_log, worst_tv, seconds = 0, 0.0, 0.0, []
        for s in reversed(range(starts)):
            forward_before = model.stats.forward_s
            block = model.score(prompt + tokens[: s + 1], tokens[s + 1 : s + size])
            seconds.append(model.stats.forward_s - forward_before)
            e, lg, tv = compare(block, one[s + 1 : s + 1 + size])
            equal, worst_log, worst_tv = equal + e, max(worst_log, lg), max(worst_tv, tv)
        table.append((size, starts * size, equal, worst_log, worst_tv, statistics.median(seconds)))
    return table


def tree_check(model: LlamaCppModel, prompt: list[int]) -> tuple[int, float, float, float]:
    """A 2-wide, 2-deep tree from the model's own top tokens: nodes, max TV of its rows against
    one-token scoring of each path, and the seconds of the tree call and a chain of equal size."""
    model.reset()
    first = np.argsort(model.next_dist(prompt))[-2:][::-1].tolist()
    tokens, parents = list(first), [-1, -1]
    for i, token in enumerate(first):
        second = np.argsort(model.next_dist([*prompt, token]))[-2:][::-1].tolist()
        tokens += second
        parents += [i, i]
    model.reset()
    model.next_dist(prompt[:-1])
    start = time.perf_counter()
    rows = model.score_tree(prompt, tokens, parents)
    tree_s = time.perf_counter() - start
    worst = 0.0
    for node in range(len(tokens)):
        path = [tokens[node]] if parents[node] < 0 else [tokens[parents[node]], tokens[node]]
        model.reset()
        model.next_dist(prompt + path[:-1])
        reference = model.next_dist(prompt + path)
        worst = max(worst, 0.5 * float(np.abs(rows[node + 1] - reference).sum()))
    model.reset()
    model.next_dist(prompt[:-1])
    start = time.perf_counter()
    model.score(prompt, tokens)
    chain_s = time.perf_counter() - start
    return len(tokens), worst, tree_s, chain_s


def end_to_end(
    target: LlamaCppModel, draft: LlamaCppModel, prompt: list[int], n: int, k: int
) -> tuple:
    """Greedy target-only vs speculative with k drafts: identical?, tokens/s of each,
    acceptance."""
    rng = np.random.default_rng(0)
    for model in (target, draft):
        model.reset()
    start = time.perf_counter()
    reference = generate_autoregressive(target, prompt, n, rng, sampling=GREEDY).tokens
    plain_s = time.perf_counter() - start
    for model in (target, draft):
        model.reset()
    start = time.perf_counter()
    trace = generate_speculative(target, draft, prompt, n, k, rng, sampling=GREEDY)
    spec_s = time.perf_counter() - start
    return trace.tokens == reference, n / plain_s, n / spec_s, trace.acceptance_rate


def report(name: str, model: LlamaCppModel, prompt: list[int]) -> None:
    load = os.getloadavg()[0]
    print(f"\n## {name}: {model.path.name}, {model.n_threads} threads, load average {load:.2f}")
    print(f"exact_block_size stated by the build: {model.exact_block_size}")
    for key, seconds in costs(model, prompt).items():
        print(f"{key}: {seconds * 1e3:.2f} ms")
    print("| block | rows | bitwise equal | max abs d log p | max TV | decode ms |")
    print("|---|---|---|---|---|---|")
    for size, rows, equal, worst_log, worst_tv, seconds in agreement(model, prompt):
        print(
            f"| {size} | {rows} | {equal} | {worst_log:.3g} | {worst_tv:.3g} "
            f"| {seconds * 1e3:.1f} |"
        )
    nodes, worst, tree_s, chain_s = tree_check(model, prompt)
    print(
        f"tree of {nodes} nodes: max TV vs path scoring {worst:.3g}; "
        f"{tree_s * 1e3:.1f} ms vs {chain_s * 1e3:.1f} ms for a chain of the same size"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=Path, default=MODELS / "qwen2.5-coder-1.5b.gguf")
    parser.add_argument("--draft", type=Path, default=MODELS / "qwen2.5-coder-0.5b.gguf")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--new-tokens", type=int, default=48)
    args = parser.parse_args()
    target = LlamaCppModel(args.target, n_threads=args.threads)
    tokenizer = load_tokenizer(target)
    prompts = [tokenizer.encode(text) for text in PROMPTS]
    report("target", target, prompts[0])
    if not args.draft.is_file():
        return
    draft = LlamaCppModel(args.draft, n_threads=args.threads)
    report("draft", draft, prompts[0])
    print("\n| prompt | k | identical | target-only tok/s | speculative tok/s | acceptance |")
    print("|---|---|---|---|---|---|")
    for text, prompt in zip(PROMPTS, prompts, strict=True):
        for k in (2, 4):
            same, plain, spec, accepted = end_to_end(target, draft, prompt, args.new_tokens, k)
            print(f"| {text[:24]!r} | {k} | {same} | {plain:.1f} | {spec:.1f} | {accepted:.2f} |")


if __name__ == "__main__":
    main()
