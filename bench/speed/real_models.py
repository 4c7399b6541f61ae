"""Wall-clock benchmark on the Qwen2.5-Coder pair: spec-decode vs target-only vs HF assisted.

For each prompt kind (code completion, a code edit whose answer repeats the prompt, prose) and
each setting (greedy, temperature 0.7) it times, interleaved in one process on the same loaded
models:

* ``target-only``: our backend, one target pass per token;
* ``spec k=K``: our exact speculative decoding with a fixed k;
* ``hf-assisted``: ``model.generate(..., assistant_model=draft)`` with Hugging Face's defaults
  (dynamic number of draft tokens, confidence cut-off 0.4), on the very same model objects;
* ``hf-target`` (with ``--hf-target``): plain ``model.generate`` (greedy only), to compare our
  backend's target-only speed with HF's.

Every run starts from empty caches and generates exactly ``--tokens`` new tokens (HF gets
``min_new_tokens`` so it does not stop earlier; the prompts ask for longer answers). The order of
variants is shuffled (seeded) within each repetition, so background load hits all of them alike;
medians over repetitions are reported. Greedy outputs are checked token for token against our
target-only output. One speculative step is profiled. Writes ``bench/results/real_models.json``,
``.png`` and ``.md`` (``--name`` changes the file name).

Run: ``python bench/speed/real_models.py`` (after ``spec-decode models prepare``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.handwritten import HANDWRITTEN_PROMPTS as PROMPTS
from bench.lib.handwritten import SETTINGS
from bench.lib.hf import CallCounter, run_hf
from bench.lib.machine import machine
from bench.lib.ours import run_ours
from bench.lib.pair import load_transformers_pair
from bench.lib.records import RunRecord
from bench.lib.repetitions import interleaved
from bench.lib.results import RESULTS, write_results
from bench.lib.summaries import greedy_identity, identity_lines, summarize_cases
from spec_decode.backends.prompts import encode_prompt
from spec_decode.backends.transformers import TransformersModel
from spec_decode.core.sampling import SamplingParams
from spec_decode.drafting.speculative import generate_speculative


def profile_step(
    target: TransformersModel, draft: TransformersModel, ids: list[int], k: int, tokens: int
) -> dict[str, float]:
    """Where a greedy speculative run's time goes, per step (milliseconds)."""
    for model in (target, draft):
        model.reset()
        model.stats.reset()
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    trace = generate_speculative(target, draft, ids, tokens, k, rng, sampling=SamplingParams(0))
    wall = time.perf_counter() - start
    steps = trace.target_passes
    per_step = {
        "wall": wall,
        "draft (drafter total)": trace.draft_seconds,
        "  draft forward": draft.stats.forward_s,
        "  draft softmax (float64)": draft.stats.softmax_s,
        "  draft cache bookkeeping": draft.stats.bookkeeping_s,
        "target (scoring total)": trace.target_seconds,
        "  target forward": target.stats.forward_s,
        "  target softmax (float64)": target.stats.softmax_s,
        "  target cache bookkeeping": target.stats.bookkeeping_s,
        "sampler (rule, warp, checks)": wall - trace.draft_seconds - trace.target_seconds,
    }
    result = {name: 1e3 * seconds / steps for name, seconds in per_step.items()}
    result["steps"] = steps
    result["draft calls per step"] = trace.draft_calls / steps
    result["draft forward ms per call"] = 1e3 * draft.stats.forward_s / draft.stats.calls
    result["target forward ms per pass"] = 1e3 * target.stats.forward_s / target.stats.calls
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--ks", default="2,3,4,5,6,8")
    parser.add_argument("--prompts", default=",".join(PROMPTS))
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument(
        "--sampled-prompts",
        default=",".join(PROMPTS),
        help="prompts also run at temperature 0.7 (the others run greedy only)",
    )
    parser.add_argument("--hf-target", action="store_true", help="also time plain HF generate")
    parser.add_argument("--name", default="real_models", help="results file name (no suffix)")
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    target, draft, tokenizer, load = load_transformers_pair()
    counters = {"target": CallCounter(target.model), "draft": CallCounter(draft.model)}
    info = machine()

    sampled = args.sampled_prompts.split(",")
    cases = [
        f"{p} | {s}"
        for s in args.settings.split(",")
        for p in args.prompts.split(",")
        if SETTINGS[s] == 0 or p in sampled
    ]
    ids = {p: encode_prompt(tokenizer, PROMPTS[p], raw=False) for p in PROMPTS}

    def variants(case: str) -> list[str]:
        greedy = SETTINGS[case.split(" | ")[1]] == 0
        extra = ["hf-target"] if greedy and args.hf_target else []
        return ["target-only", *(f"spec k={k}" for k in ks), "hf-assisted", *extra]

    def run(case: str, name: str, rep: int) -> RunRecord:
        prompt, setting = case.split(" | ")
        temperature = SETTINGS[setting]
        if name.startswith("hf-"):
            d = draft if name == "hf-assisted" else None
            return run_hf(target, d, counters, ids[prompt], temperature, args.tokens, rep)
        k = None if name == "target-only" else int(name.split("=")[1])
        return run_ours(target, draft, ids[prompt], k, temperature, args.tokens, rep)

    raw = interleaved(cases, variants, args.reps, run)
    profile = profile_step(target, draft, ids["code completion"], 4, args.tokens)
    results = {
        "machine": info,
        "load_seconds": load,
        "tokens": args.tokens,
        "reps": args.reps,
        "summary": summarize_cases(raw),
        "greedy_identical_to_target_only": greedy_identity(raw),
        "profile_k4_code_completion_ms_per_step": profile,
        "texts": {
            case: tokenizer.decode(by_variant["target-only"][0]["tokens"])
            for case, by_variant in raw.items()
        },
    }
    write_results(args.name, results, markdown)
    plot(results, args.name)


def markdown(results: dict[str, object]) -> str:
    info = results["machine"]
    lines = [
        "## Real models: Qwen2.5-Coder-1.5B-Instruct (target) / 0.5B-Instruct (draft), CPU",
        "",
        f"Machine: {info['cpu']}, {info['cores']} cores, torch {info['torch']}, "
        f"transformers {info['transformers']}; load average "
        f"{info['load_average_start'][0]:.2f} at start, {info['load_average_end'][0]:.2f} at end. "
        f"Target fp16-weight linear layers, draft int8. {results['tokens']} new tokens per run, "
        f"median of {results['reps']} interleaved repetitions (order shuffled per repetition).",
        "",
        "| prompt | setting | variant | tokens/s | vs target-only | target passes | "
        "draft calls | acceptance | tokens/pass |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for case, by_variant in results["summary"].items():
        prompt, setting = case.split(" | ")
        base = by_variant["target-only"]["tokens_per_second"]
        for name, s in by_variant.items():
            acc = "-" if s["acceptance_rate"] is None else f"{s['acceptance_rate']:.2f}"
            tpp = "-" if s["tokens_per_pass"] is None else f"{s['tokens_per_pass']:.2f}"
            lines.append(
                f"| {prompt} | {setting} | {name} | {s['tokens_per_second']:.2f} | "
                f"{s['tokens_per_second'] / base:.2f}x | {s['target_passes']:.0f} | "
                f"{s['draft_calls']:.0f} | {acc} | {tpp} |"
            )
    lines += identity_lines(results["greedy_identical_to_target_only"])
    lines += ["", "Profile of one greedy k=4 run on code completion (ms per step):", ""]
    lines += ["| part | ms |", "|---|---|"]
    for name, value in results["profile_k4_code_completion_ms_per_step"].items():
        lines.append(f"| {name.strip()} | {value:.2f} |")
    lines += [
        "",
        "Load times (s): "
        + ", ".join(f"{name} {seconds:.1f}" for name, seconds in results["load_seconds"].items()),
        "",
        "Reproduce: `pip install -e '.[hf,qwen]' && spec-decode models prepare && "
        "python bench/speed/real_models.py`",
    ]
    return "\n".join(lines) + "\n"


def plot(results: dict[str, object], stem: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(results["summary"])
    fig, axes = plt.subplots(1, len(cases), figsize=(max(3.2 * len(cases), 7.0), 4.2), sharey=True)
    for ax, case in zip(np.atleast_1d(axes), cases, strict=True):
        by_variant = results["summary"][case]
        names = sorted(by_variant, key=lambda n: (not n.startswith("target"), n))
        rates = [by_variant[n]["tokens_per_second"] for n in names]
        colors = [
            "#9ca3af" if n.startswith("target") or n == "hf-target"
            else "#f59e0b" if n.startswith("hf")
            else "#3b82f6"
            for n in names
        ]  # fmt: skip
        ax.bar(range(len(names)), rates, color=colors)
        ax.set_xticks(range(len(names)), names, rotation=70, fontsize=7)
        ax.set_title(case.replace(" | ", "\n"), fontsize=8)
    np.atleast_1d(axes)[0].set_ylabel("tokens / s (median)")
    fig.suptitle("Qwen2.5-Coder 1.5B target / 0.5B draft on CPU: ours (blue), HF (orange)")
    fig.tight_layout()
    fig.savefig(RESULTS / f"{stem}.png", dpi=120)


if __name__ == "__main__":
    main()
