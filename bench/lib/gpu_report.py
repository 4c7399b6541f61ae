"""The GPU benchmark's report (``bench/speed/gpu.py``): medians per category and setting, speedups
over Hugging Face's target-only ``generate``, the goal, the block agreement, the markdown and the
plot."""

from __future__ import annotations

from pathlib import Path

from bench.lib.plots import plot_cost_curve
from bench.lib.prompt_sets import CATEGORIES
from bench.lib.records import RunRecord
from bench.lib.summaries import identity_lines, summarize

HF_TARGET = "HF target-only"
HF_ASSISTED = "HF assisted"
OURS_TARGET = "ours target-only"
OURS_AUTO = "ours auto"
#: The speedup over HF target-only on HumanEval that the GPU path aims for.
GOAL = 2.0


def summary_by_category(raw: dict, prompts: dict) -> dict[str, dict[str, dict[str, object]]]:
    """Per category and setting, each variant's medians over its prompts and repetitions."""
    pooled: dict[str, dict[str, list[RunRecord]]] = {}
    for case, by_variant in raw.items():
        name, setting = case.split(" | ")
        key = f"{prompts[name].category} | {setting}"
        for variant, records in by_variant.items():
            pooled.setdefault(key, {}).setdefault(variant, []).extend(records)
    return {
        key: {variant: summarize(records) for variant, records in by_variant.items()}
        for key, by_variant in pooled.items()
    }


def speedups(results: dict) -> dict[str, dict[str, float]]:
    """Median tokens/s of each variant over HF target-only's, per category and setting."""
    return {
        key: {
            variant: s["tokens_per_second"] / by_variant[HF_TARGET]["tokens_per_second"]
            for variant, s in by_variant.items()
        }
        for key, by_variant in results["summary"].items()
    }


def markdown(results: dict) -> str:
    info, device = results["machine"], results["device"]
    where = (
        f"{device['name']} ({device['memory_gib']:.0f} GiB, CUDA {device['cuda']})"
        if device["device"] == "cuda"
        else f"the CPU ({info['cpu']}, {device['torch_threads']} torch threads)"
    )
    variants = results["variants"]
    ratio = speedups(results)
    lines = [
        "## GPU: spec-decode on transformers beside Hugging Face's generate "
        "(`python bench/speed/gpu.py`)",
        "",
        f"Target {results['target']}, draft {results['draft']}, {results['weights']} weights on "
        f"{where}; torch {info.get('torch')}, transformers {info.get('transformers')}; load "
        f"average {info['load_average_start'][0]:.2f} at start, "
        f"{info['load_average_end'][0]:.2f} at end. {results['per_category']} prompts per "
        f"category ({', '.join(CATEGORIES)}; seeded sample, seed {results['seed']}), "
        f"{results['tokens']} new tokens per run, {results['reps']} interleaved repetition(s); "
        "medians over the category's prompts and repetitions. tokens/s = new tokens / wall "
        "seconds from empty caches, prompt processing included, device synchronized before and "
        "after every run. x: relative to HF target-only (`model.generate`).",
        "",
        "| category | setting | " + " | ".join(variants) + " |",
        "|---|---|" + "---|" * len(variants),
    ]
    for key, by_variant in results["summary"].items():
        category, setting = key.split(" | ")
        cells = [
            f"{by_variant[v]['tokens_per_second']:.1f} ({ratio[key][v]:.2f}x)" for v in variants
        ]
        lines.append(f"| {category} | {setting} | " + " | ".join(cells) + " |")
    lines += ["", *goal_lines(ratio), ""]
    lines += [
        "| category | setting | variant | tokens/s | vs HF target-only | target passes | "
        "acceptance | tokens/pass |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, by_variant in results["summary"].items():
        category, setting = key.split(" | ")
        for v in variants:
            s = by_variant[v]
            acc = "-" if s["acceptance_rate"] is None else f"{s['acceptance_rate']:.2f}"
            tpp = "-" if s["tokens_per_pass"] is None else f"{s['tokens_per_pass']:.2f}"
            lines.append(
                f"| {category} | {setting} | {v} | {s['tokens_per_second']:.1f} | "
                f"{ratio[key][v]:.2f}x | {s['target_passes']:.0f} | {acc} | {tpp} |"
            )
    lines += identity_lines(results["greedy_identity"])
    lines += ["", *agreement_lines(results)]
    curve = {int(n): ms for n, ms in results["cost_curve_ms"].items()}
    lines += [
        "",
        f"Cost curve measured on {device['device']} (target pass of n tokens, ms): "
        + ", ".join(f"{n}: {curve[n]:.1f}" for n in (1, 2, 3, 5, 9, 17) if n in curve)
        + (
            ""
            if results["draft_token_ms"] is None
            else f"; a draft token {results['draft_token_ms']:.1f} ms"
        )
        + ". Load (s): "
        + ", ".join(f"{name} {s:.1f}" for name, s in results["load_seconds"].items())
        + ".",
    ]
    return "\n".join(lines) + "\n"


def goal_lines(ratio: dict[str, dict[str, float]]) -> list[str]:
    """The best of ours against HF target-only on HumanEval, per setting, against the goal."""
    lines = []
    for key, by_variant in ratio.items():
        if not key.startswith("humaneval"):
            continue
        ours = {v: x for v, x in by_variant.items() if v.startswith("ours")}
        best = max(ours, key=ours.get)
        verdict = "met" if ours[OURS_AUTO] >= GOAL else "not met"
        lines.append(
            f"- HumanEval, {key.split(' | ')[1]}: ours auto {ours[OURS_AUTO]:.2f}x HF "
            f"target-only, best of ours {ours[best]:.2f}x ({best}); goal >= {GOAL:.0f}x with "
            f"the default (auto): {verdict}."
        )
    return lines


def agreement_lines(results: dict) -> list[str]:
    """The block/one-token agreement measured on the device, per block length."""
    agreement = results["agreement"]
    if not agreement:
        return ["Block/one-token agreement: not measured (needs the greedy setting)."]
    lines = [
        f"Block/one-token agreement of the target on {results['device']['device']} "
        f"({results['weights']} weights): our greedy output after "
        f"{', '.join(agreement)} scored in blocks (a fully accepting speculative run) against "
        "one token at a time (target-only decoding). Logit shift: the most a difference of two "
        "logits of a row moves (the CPU backend states 1e-3 for fp32/fp16 linear layers and "
        "re-scores rows whose top two are closer).",
        "",
        "| drafted block | rows | max abs(p difference) | max logit shift | argmax changed |",
        "|---|---|---|---|---|",
    ]
    blocks = sorted({int(b) for by_block in agreement.values() for b in by_block})
    for block in blocks:
        figures = [by_block[str(block)] for by_block in agreement.values()]
        rows = sum(f["rows"] for f in figures)
        lines.append(
            f"| {block} | {rows} | {max(f['max_abs_prob'] for f in figures):.2e} | "
            f"{max(f['max_logit_shift'] for f in figures):.2e} | "
            f"{sum(f['flips'] for f in figures)} of {rows} |"
        )
    return lines


def plot(results: dict, path: Path) -> None:
    """Median tokens/s per category and variant, with the device's cost curve beside."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = results["summary"]
    variants = results["variants"]
    fig, (ax, curve) = plt.subplots(1, 2, figsize=(14, 4.8), gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / len(variants)
    for i, variant in enumerate(variants):
        xs = [j + i * width for j in range(len(table))]
        rates = [by_variant[variant]["tokens_per_second"] for by_variant in table.values()]
        ax.bar(xs, rates, width, label=variant)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(table))], list(table), fontsize=7)
    ax.set_ylabel("tokens / s (median)")
    ax.legend(fontsize=6, ncol=2)
    device = results["device"]
    where = device.get("name", device["device"])
    pair = f"{Path(results['target']).name} / {Path(results['draft']).name}"
    ax.set_title(f"{pair}, {results['weights']} on {where}")
    plot_cost_curve(curve, results["cost_curve_ms"])
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
