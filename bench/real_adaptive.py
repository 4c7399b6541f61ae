"""Wall-clock companion of ``bench/real_models.py``: prompt lookup and adaptive k on the Qwen pair.

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

Run: ``python bench/real_adaptive.py`` (after ``spec-decode models prepare``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections.abc import Callable

from real_models import (
    PROMPTS,
    RESULTS,
    SETTINGS,
    identity_lines,
    machine,
    run_ours,
    summarize,
)
from transformers.utils import logging as hf_logging

from spec_decode import prepared
from spec_decode.backends.transformers import TransformersModel, load_model, load_tokenizer
from spec_decode.cli_generate import encode_prompt
from spec_decode.drafters import Drafter, FallbackDrafter, ModelDrafter
from spec_decode.lookup import PromptLookupDrafter
from spec_decode.policies import CostModelK, FixedK, KPolicy, ScheduleK
from spec_decode.sampling import SamplingParams

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
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    target = load_model(prepared.prepare(prepared.DEFAULT_TARGET), "fp16")
    draft = load_model(prepared.prepare(prepared.DEFAULT_DRAFT), "int8")
    tokenizer = load_tokenizer(prepared.model_dir(prepared.DEFAULT_TARGET))
    info = machine()
    info["load_average_start"] = os.getloadavg()

    cases = [(p, s) for s in args.settings.split(",") for p in args.prompts.split(",")]
    raw: dict[str, dict[str, list[dict[str, object]]]] = {f"{p} | {s}": {} for p, s in cases}
    order = random.Random(0)
    for rep in range(args.reps):
        for prompt, setting in cases:
            ids = encode_prompt(tokenizer, PROMPTS[prompt], raw=False)
            temperature = SETTINGS[setting]
            names = list(VARIANTS)
            order.shuffle(names)
            for name in names:
                make_drafter, policy = VARIANTS[name]
                drafter = make_drafter(draft, SamplingParams(temperature)) if make_drafter else None
                result = run_ours(
                    target, draft, ids, policy, temperature, args.tokens, rep, drafter=drafter
                )
                raw[f"{prompt} | {setting}"].setdefault(name, []).append(result)
                rate = len(result["tokens"]) / result["seconds"]
                print(f"rep {rep} {prompt} | {setting} | {name}: {rate:.2f} tok/s", flush=True)

    identity = {
        case: {
            name: all(r["tokens"] == by_variant["target-only"][0]["tokens"] for r in runs)
            for name, runs in by_variant.items()
        }
        for case, by_variant in raw.items()
        if case.endswith("greedy")
    }
    info["load_average_end"] = os.getloadavg()
    results = {
        "machine": info,
        "tokens": args.tokens,
        "reps": args.reps,
        "summary": {
            case: {name: summarize(runs) for name, runs in by_variant.items()}
            for case, by_variant in raw.items()
        },
        "greedy_identical_to_target_only": identity,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "real_adaptive.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / "real_adaptive.md").write_text(markdown(results))
    print(markdown(results))


def markdown(results: dict) -> str:
    info = results["machine"]
    lines = [
        "## Real models: prompt lookup and adaptive k (`python bench/real_adaptive.py`)",
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
    lines += identity_lines(results)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
