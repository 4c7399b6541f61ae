"""The CPU benchmark's report (``bench/speed/cpu.py``): greedy identity by token ids and by text,
median tokens/s per category, setting and engine, the markdown and the plot."""

from __future__ import annotations

import statistics

from bench.lib.plots import plot_cost_curve
from bench.lib.prompt_sets import CATEGORIES
from bench.lib.results import RESULTS

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


def medians(results: dict) -> dict[str, dict[str, dict[str, float]]]:
    """Median tokens/s per category, setting and variant."""
    table: dict[str, dict[str, dict[str, list[float]]]] = {}
    for case, by_variant in results["runs"].items():
        name, setting = case.split(" | ")
        category = results["prompts"][name]["category"]
        for variant, records in by_variant.items():
            rates = [r["generated"] / r["seconds"] for r in records]
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
