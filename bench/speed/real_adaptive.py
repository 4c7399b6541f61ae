"""Wall-clock companion of ``bench/speed/real_models.py``: prompt lookup and adaptive k on the
Qwen pair.

Same prompts, models and helpers as ``real_models.py`` (``run_ours``, ``summarize``, ``machine``).
For each prompt and setting it times, interleaved in one process (order shuffled, seeded):

* ``target-only``;
* ``model, fixed k=4``, ``model, schedule`` (+2 after a fully accepted step, -1 after a rejection,
  from 4) and ``model, cost`` (the k of best expected speedup at the running alpha and the
  draft/target cost ratio measured on the fly);
* ``model + confidence 0.4, schedule``: Hugging Face's assisted-generation defaults (dynamic
  schedule, confidence cut-off 0.4) in our exact sampler;
* ``lookup, fixed k=8`` and ``lookup, schedule``: prompt lookup (trigrams down to unigrams, up to
  10 tokens), no draft model;
* ``lookup then model, cost``: lookup on a trigram match, the draft model otherwise.

Every run generates exactly ``--tokens`` tokens from empty caches; greedy outputs are checked token
for token against target-only. Writes ``bench/results/real_adaptive.json`` and ``.md``.

Run: ``python bench/speed/real_adaptive.py`` (after ``spec-decode models prepare``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.handwritten import HANDWRITTEN_PROMPTS as PROMPTS
from bench.lib.handwritten import SETTINGS
from bench.lib.machine import machine
from bench.lib.ours import run_ours
from bench.lib.pair import load_transformers_pair
from bench.lib.repetitions import interleaved
from bench.lib.results import write_results
from bench.lib.summaries import greedy_identity, identity_lines, summarize_cases
from spec_decode.backends.prompts import encode_prompt
from spec_decode.backends.transformers import TransformersModel
from spec_decode.core.protocols import Drafter, KPolicy
from spec_decode.core.sampling import SamplingParams
from spec_decode.drafting.drafters import FallbackDrafter, ModelDrafter
from spec_decode.drafting.lookup import PromptLookupDrafter
from spec_decode.drafting.policies import CostModelK, FixedK, ScheduleK

#: name -> (drafter from the draft model and the sampling controls, or None for the plain model
#: drafter; k policy, or None for target-only)
Variant = tuple[Callable[[TransformersModel, SamplingParams], Drafter] | None, KPolicy | None]
VARIANTS: dict[str, Variant] = {
    "target-only": (None, None),
    "model, fixed k=4": (None, FixedK(4)),
    "model, schedule": (None, ScheduleK(initial=4)),
    "model, cost": (None, CostModelK(initial=4)),
    "model + confidence 0.4, schedule": (
        lambda draft, sampling: ModelDrafter(draft, sampling, min_confidence=0.4),
        ScheduleK(initial=4),
    ),
    "lookup, fixed k=8": (lambda draft, _: PromptLookupDrafter(draft.vocab_size), FixedK(8)),
    "lookup, schedule": (
        lambda draft, _: PromptLookupDrafter(draft.vocab_size),
        ScheduleK(initial=4, k_max=10),
    ),
    "lookup then model, cost": (
        lambda draft, sampling: FallbackDrafter(
            PromptLookupDrafter(draft.vocab_size, min_ngram=3), ModelDrafter(draft, sampling)
        ),
        CostModelK(initial=4),
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--prompts", default="code edit,prose")
    parser.add_argument("--settings", default="greedy")
    args = parser.parse_args()
    target, draft, tokenizer, _ = load_transformers_pair()
    info = machine()
    cases = [f"{p} | {s}" for s in args.settings.split(",") for p in args.prompts.split(",")]

    def run(case: str, name: str, rep: int) -> dict[str, object]:
        prompt, setting = case.split(" | ")
        ids = encode_prompt(tokenizer, PROMPTS[prompt], raw=False)
        temperature = SETTINGS[setting]
        make_drafter, policy = VARIANTS[name]
        drafter = make_drafter(draft, SamplingParams(temperature)) if make_drafter else None
        return run_ours(target, draft, ids, policy, temperature, args.tokens, rep, drafter=drafter)

    raw = interleaved(cases, lambda case: list(VARIANTS), args.reps, run)
    results = {
        "machine": info,
        "tokens": args.tokens,
        "reps": args.reps,
        "summary": summarize_cases(raw),
        "greedy_identical_to_target_only": greedy_identity(raw),
    }
    write_results("real_adaptive", results, markdown)


def markdown(results: dict) -> str:
    info = results["machine"]
    lines = [
        "## Real models: prompt lookup and adaptive k (`python bench/speed/real_adaptive.py`)",
        "",
        f"Qwen2.5-Coder-1.5B-Instruct (fp16-weight target) / 0.5B-Instruct (int8 draft) on "
        f"{info['cpu']}, {info['cores']} cores, torch {info['torch']}; load average "
        f"{info['load_average_start'][0]:.2f} at start, {info['load_average_end'][0]:.2f} at end "
        f"(a shared machine: wall-clock figures are noisy, target passes are exact). "
        f"{results['tokens']} new tokens per run, median of {results['reps']} repetition(s), "
        "variants interleaved in shuffled order. 'drafted' counts drafted tokens: draft-model "
        "calls for the model drafter, free copies for lookup.",
        "",
        "| prompt | setting | variant | tokens/s | vs target-only | target passes | drafted | "
        "acceptance | tokens/pass |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for case, by_variant in results["summary"].items():
        prompt, setting = case.split(" | ")
        base = by_variant["target-only"]["tokens_per_second"]
        for name in VARIANTS:
            s = by_variant[name]
            acceptance = "-" if s["acceptance_rate"] is None else f"{s['acceptance_rate']:.2f}"
            lines.append(
                f"| {prompt} | {setting} | {name} | {s['tokens_per_second']:.2f} | "
                f"{s['tokens_per_second'] / base:.2f}x | {s['target_passes']:.0f} | "
                f"{s['draft_calls']:.0f} | {acceptance} | {s['tokens_per_pass']:.2f} |"
            )
    lines += identity_lines(results["greedy_identical_to_target_only"])
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
