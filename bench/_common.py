"""What every real-model benchmark shares: the machine it ran on, loading the packaged pair, the
interleaved repetition loop, the greedy identity check, medians, and writing results.

Benchmarks import this as ``from _common import ...`` (run them as ``python bench/NAME.py``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import random
import statistics
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path

import numpy as np

from spec_decode.backends.loading import Loaded
from spec_decode.core.generate import generate_autoregressive
from spec_decode.core.models import Model
from spec_decode.core.protocols import Drafter, KPolicy
from spec_decode.core.sampling import SamplingParams
from spec_decode.core.trace import Trace
from spec_decode.drafting.costs import CostCurve
from spec_decode.drafting.speculative import generate_speculative
from spec_decode.serving.config import EngineConfig
from spec_decode.serving.engine import Engine

RESULTS = Path(__file__).parent / "results"

#: The hand-written prompts of the transformers-backend benchmarks (kept for reproducing them).
HANDWRITTEN_PROMPTS = {
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
#: Sampling settings by name: temperature (0 is greedy).
SETTINGS = {"greedy": 0.0, "temperature 0.7": 0.7}

#: One timed run's record: at least "tokens" and "seconds".
RunRecord = dict[str, object]


def machine() -> dict[str, object]:
    """The CPU, core count, Python and the versions of the inference libraries present."""
    cpu = "unknown"
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    versions = {}
    for package in ("numpy", "torch", "transformers", "llama_cpp_python"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        **versions,
        "load_average_start": os.getloadavg(),
    }


def load_transformers_pair() -> tuple[object, object, object, dict[str, float]]:
    """The packaged pair on the transformers backend (fp16 target, int8 draft), its tokenizer,
    and the seconds each load took."""
    from transformers.utils import logging as hf_logging

    from spec_decode.backends import converted
    from spec_decode.backends.registry import DEFAULT_DRAFT, DEFAULT_TARGET
    from spec_decode.backends.transformers import load_model, load_tokenizer

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    seconds = {}
    start = time.perf_counter()
    target = load_model(converted.prepare(DEFAULT_TARGET), "fp16")
    seconds["target (fp16)"] = time.perf_counter() - start
    start = time.perf_counter()
    draft = load_model(converted.prepare(DEFAULT_DRAFT), "int8")
    seconds["draft (int8)"] = time.perf_counter() - start
    tokenizer = load_tokenizer(converted.model_dir(DEFAULT_TARGET))
    return target, draft, tokenizer, seconds


def interleaved(
    cases: Sequence[str],
    variants: Callable[[str], list[str]],
    reps: int,
    run: Callable[[str, str, int], RunRecord],
) -> dict[str, dict[str, list[RunRecord]]]:
    """``reps`` repetitions of every case's variants, in a seeded shuffled order per case and
    repetition so background load hits all variants alike: ``raw[case][variant]`` lists the
    records of ``run(case, variant, rep)``."""
    raw: dict[str, dict[str, list[RunRecord]]] = {case: {} for case in cases}
    order = random.Random(0)
    for rep in range(reps):
        for case in cases:
            names = variants(case)
            order.shuffle(names)
            for name in names:
                record = run(case, name, rep)
                raw[case].setdefault(name, []).append(record)
                rate = len(record["tokens"]) / record["seconds"]
                print(f"rep {rep} {case} | {name}: {rate:.2f} tok/s", flush=True)
    return raw


def run_ours(
    target: Model,
    draft: Model,
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
    return trace_record(trace, time.perf_counter() - start)


def run_auto(
    target: Loaded,
    draft: Loaded,
    costs: CostCurve,
    ids: list[int],
    *,
    temperature: float,
    tokens: int,
    seed: int,
    k_max: int,
) -> dict[str, object]:
    """One run of ours with the default auto policy, through the engine that ``generate`` and
    the server run (its default rule): a fresh engine per run, so the planner's acceptance
    estimates start from the prior, no history is shared and the caches start cold (one prompt
    per process, like the baselines); ``tokens`` tokens, end-of-generation included."""
    config = EngineConfig(k=k_max, shared_history=False, reuse_cache=False)
    whole = {"stop_ids": frozenset()}  # every variant generates the same number of tokens
    engine = Engine(
        config,
        dataclasses.replace(target, **whole),
        dataclasses.replace(draft, **whole),
        costs,
        k=k_max,
    )
    request = engine.prepare(
        ids, max_tokens=tokens, sampling=SamplingParams(temperature), seed=seed
    )
    completion = engine.generate(request)
    return trace_record(completion.trace, completion.seconds)


def trace_record(trace: Trace, seconds: float) -> dict[str, object]:
    """The record of one of our runs: tokens, wall seconds and the trace's exact counts
    (acceptance None when nothing was drafted)."""
    return {
        "tokens": trace.tokens,
        "seconds": seconds,
        "target_passes": trace.target_passes,
        "draft_calls": trace.draft_calls,
        "acceptance_rate": trace.acceptance_rate if trace.proposed else None,
        "tokens_per_pass": trace.tokens_per_pass,
    }


def hf_record(
    tokens: list[int], seconds: float, passes: int, draft_calls: int
) -> dict[str, object]:
    """The record of one Hugging Face ``generate`` run, counted like ours (its forward calls
    read by hooks; acceptance is not reported by transformers)."""
    return {
        "tokens": tokens,
        "seconds": seconds,
        "target_passes": passes,
        "draft_calls": draft_calls,
        "acceptance_rate": None,
        "tokens_per_pass": len(tokens) / passes if passes else None,
    }


def plot_cost_curve(axis: object, cost_curve_ms: dict[str, float]) -> None:
    """Draw a calibrated cost curve (ms by tokens scored) in units of a one-token pass, beside
    the line of n one-token passes."""
    curve_ms = {int(n): ms for n, ms in cost_curve_ms.items()}
    sizes = list(curve_ms)
    axis.plot(sizes, [ms / curve_ms[1] for ms in curve_ms.values()], "o-")
    axis.plot(sizes, sizes, ":", color="grey", label="n one-token passes")
    axis.set_xlabel("tokens scored in one target pass")
    axis.set_ylabel("cost / one-token pass")
    axis.set_title("calibrated cost curve", fontsize=9)
    axis.legend(fontsize=7)


def greedy_identity(
    raw: dict[str, dict[str, list[RunRecord]]], reference: str = "target-only"
) -> dict[str, dict[str, bool]]:
    """Per greedy case, whether every run of each variant emitted the reference's tokens."""
    identity = {}
    for case, by_variant in raw.items():
        if not case.endswith("greedy"):
            continue
        expected = by_variant[reference][0]["tokens"]
        identity[case] = {
            name: all(r["tokens"] == expected for r in runs) for name, runs in by_variant.items()
        }
    return identity


def identity_lines(identity: dict[str, dict[str, bool]]) -> list[str]:
    """Markdown lines saying, per case, whether greedy output matched target-only output."""
    lines = ["", "Greedy output identical to our target-only output (every repetition):", ""]
    for case, by_variant in identity.items():
        differing = [name for name, same in by_variant.items() if not same]
        verdict = "all identical" if not differing else f"DIFFERENT: {', '.join(differing)}"
        lines.append(f"- {case}: {verdict}")
    return lines


def summarize(runs: list[RunRecord]) -> dict[str, object]:
    """Medians over repetitions: tokens/s (all rates kept) and each counted figure present."""
    rates = [len(r["tokens"]) / r["seconds"] for r in runs]
    summary: dict[str, object] = {"tokens_per_second": statistics.median(rates), "all": rates}
    for key in ("target_passes", "draft_calls", "acceptance_rate", "tokens_per_pass"):
        values = [r[key] for r in runs if r.get(key) is not None]
        summary[key] = statistics.median(values) if values else None
    return summary


def summarize_cases(raw: dict[str, dict[str, list[RunRecord]]]) -> dict[str, dict[str, object]]:
    """:func:`summarize` for every variant of every case."""
    return {
        case: {name: summarize(runs) for name, runs in by_variant.items()}
        for case, by_variant in raw.items()
    }


def write_results(
    stem: str, results: dict[str, object], markdown: Callable[[dict[str, object]], str]
) -> None:
    """Record the load average at the end, then write ``bench/results/STEM.json`` and the
    ``markdown`` of the results to ``STEM.md``."""
    results["machine"]["load_average_end"] = os.getloadavg()
    results["created"] = time.strftime("%Y-%m-%d %H:%M:%S")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(results, indent=2) + "\n")
    text = markdown(results)
    (RESULTS / f"{stem}.md").write_text(text)
    print(text)
