"""The coupled rule against the standard rule: sampler cost, acceptance on toy pairs against both
closed forms, and acceptance, tokens per second and seed identity on the packaged Qwen pair.

Three parts, each written to ``bench/results/coupled.json`` and ``.md``:

* **sampler cost** per position on a 151,936-entry row (a Qwen target row when the models are
  loaded): the two-level race, the flat race and inverse CDF with the position's noise computed
  fresh (what the first of draft and target pays) and cached (what the second pays), beside the
  standard rule's categorical draw;
* **toy Markov pairs** (vocabulary 32, k = 4): measured acceptance and tokens per pass of both
  rules beside their exact long runs (:func:`spec_decode.theory.standard.markov_expectation`,
  :func:`spec_decode.theory.coupled.coupled_markov_expectation`);
* **the Qwen pair** on llama.cpp (1.5B target, 0.5B draft, ``--k`` fixed): per prompt and
  temperature, target-only decoding with positional noise, the standard rule and the coupled rule
  (acceptance, tokens per pass, tokens per second, and whether the coupled output is target-only's
  token for token); then, on the rows of the target-only continuation, the per-position
  acceptance each rule would have: 1 - TV (standard), the flat race, the two-level race and
  inverse CDF (coupled).

Run: ``python bench/toy/coupled.py`` (``--no-models`` for the first two parts only). On a machine
busier than its cores, pass ``--threads 1``: llama.cpp's threads wait for each other by spinning,
and two threads on an oversubscribed pair of cores run a target pass much slower than one
thread does (BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.machine import machine
from bench.lib.prompt_sets import sample
from bench.lib.records import trace_record
from bench.lib.results import write_results
from spec_decode.core.coupled import coupled_rule
from spec_decode.core.generate import generate_autoregressive
from spec_decode.core.models import Model, score
from spec_decode.core.noise import SeededNoise, positional_source
from spec_decode.core.randomness import NumpySource
from spec_decode.core.rules import exact_rule
from spec_decode.core.samplers import RaceNoise, UniformNoise
from spec_decode.core.sampling import SamplingParams
from spec_decode.drafting.speculative import generate_speculative
from spec_decode.theory.coupled import coupling_match
from spec_decode.toy.experiments import ToySetup, run_experiment

VOCAB = 151_936
TOY_AGREEMENTS = (0.5, 0.8, 0.95)
TOY_TEMPERATURES = (1.0, 0.7)


def sampler_costs(row: np.ndarray, positions: int) -> dict[str, dict[str, float]]:
    """Median milliseconds per position of each positional sampler on ``row``."""
    key = SeededNoise(np.random.SeedSequence(0)).key_words
    makers = {
        "two-level race": lambda t: RaceNoise(key, t),
        "flat race (float32)": lambda t: RaceNoise(key, t, flat=True),
        "inverse CDF": lambda t: UniformNoise(float(np.random.default_rng(t).random())),
    }
    costs: dict[str, dict[str, float]] = {}
    for name, make in makers.items():
        fresh, cached = [], []
        for t in range(positions):
            start = time.perf_counter()
            noise = make(t)
            noise.choose(row)
            middle = time.perf_counter()
            noise.choose(row)
            fresh.append(middle - start)
            cached.append(time.perf_counter() - middle)
        costs[name] = {
            "fresh_ms": 1e3 * statistics.median(fresh),
            "cached_ms": 1e3 * statistics.median(cached),
        }
    source, draws = NumpySource(np.random.default_rng(0)), []
    for _ in range(positions):
        start = time.perf_counter()
        source.categorical(row)
        draws.append(time.perf_counter() - start)
    costs["standard: categorical draw"] = {"fresh_ms": 1e3 * statistics.median(draws)}
    return costs


def toy(tokens: int) -> list[dict[str, object]]:
    """Both rules on toy pairs, measured beside their exact long runs."""
    rows = []
    for temperature in TOY_TEMPERATURES:
        for agreement in TOY_AGREEMENTS:
            for rule in ("standard", "coupled"):
                result = run_experiment(
                    ToySetup(vocab_size=32, seed=1),
                    agreement,
                    4,
                    tokens,
                    0.1,
                    seed=2,
                    sampling=SamplingParams(temperature),
                    rule=rule,
                )
                rows.append(
                    {
                        "temperature": temperature,
                        "agreement": agreement,
                        "rule": rule,
                        "alpha": result.alpha,
                        "acceptance": result.acceptance_rate,
                        "expected_acceptance": result.expected_acceptance_rate,
                        "tokens_per_pass": result.tokens_per_pass,
                        "expected_tokens_per_pass": result.expected_tokens_per_pass,
                    }
                )
                print(rows[-1], flush=True)
    return rows


def row_acceptance(
    target: Model, draft: Model, prompt: list[int], tokens: list[int], sampling: SamplingParams
) -> dict[str, float]:
    """Mean per-position acceptance of each rule on the rows along ``tokens``."""
    target.reset()
    draft.reset()
    p = sampling.warp(score(target, prompt, tokens[:-1]))
    q = sampling.warp(score(draft, prompt, tokens[:-1]))
    figures: dict[str, list[float]] = {
        "standard (1 - TV)": [],
        "coupled, flat race": [],
        "coupled, two-level race": [],
        "coupled, inverse CDF": [],
    }
    for p_row, q_row in zip(p, q, strict=True):
        figures["standard (1 - TV)"].append(float(np.minimum(p_row, q_row).sum()))
        for name, sampler in (
            ("coupled, flat race", "flat-race"),
            ("coupled, two-level race", "race"),
            ("coupled, inverse CDF", "inverse-cdf"),
        ):
            figures[name].append(float(coupling_match(p_row, q_row, sampler).sum()))
    return {name: float(np.mean(values)) for name, values in figures.items()}


def qwen(tokens: int, k: int, threads: int, temperatures: list[float]) -> dict[str, object]:
    """Target-only, standard and coupled runs on one HumanEval and one MT-bench prompt."""
    from spec_decode.backends import assembly, registry
    from spec_decode.backends.llamacpp import load_model, load_tokenizer
    from spec_decode.backends.prompts import encode_prompt

    start = time.perf_counter()
    target = load_model(assembly.gguf_file(registry.DEFAULT_TARGET), n_threads=threads)
    draft = load_model(assembly.gguf_file(registry.DEFAULT_DRAFT), n_threads=threads)
    load_seconds = time.perf_counter() - start
    tokenizer = load_tokenizer(target)
    prompts = [p for p in sample(1) if p.category in ("humaneval", "mtbench")]
    first_ids = encode_prompt(tokenizer, prompts[0].text, raw=not prompts[0].chat)
    row = target.next_dist(first_ids)  # a real target row for the cost measurement
    for model in (target, draft):
        model.next_dist(first_ids[:1])  # untimed: page the weights in
    runs, acceptance = [], []
    for prompt in prompts:
        ids = encode_prompt(tokenizer, prompt.text, raw=not prompt.chat)
        for temperature in temperatures:
            sampling = SamplingParams(temperature)
            seed = 3
            records = {}
            for name in ("target-only", "standard", "coupled"):
                target.reset()
                draft.reset()
                started = time.perf_counter()
                if name == "target-only":
                    trace = generate_autoregressive(
                        target, ids, tokens, positional_source(seed), sampling=sampling
                    )
                else:
                    trace = generate_speculative(
                        target,
                        draft,
                        ids,
                        tokens,
                        k,
                        np.random.default_rng(seed)
                        if name == "standard"
                        else positional_source(seed),
                        sampling=sampling,
                        rule=coupled_rule if name == "coupled" else exact_rule,
                    )
                records[name] = trace_record(trace, time.perf_counter() - started)
                rate = len(trace.tokens) / records[name]["seconds"]
                print(f"{prompt.category} T={temperature} {name}: {rate:.2f} tok/s", flush=True)
            same = records["coupled"]["tokens"] == records["target-only"]["tokens"]
            for name, record in records.items():
                runs.append(
                    {
                        "prompt": f"{prompt.category} {prompt.source_id}",
                        "temperature": temperature,
                        "run": name,
                        "tokens": len(record["tokens"]),
                        "tokens_per_second": len(record["tokens"]) / record["seconds"],
                        "acceptance_rate": record["acceptance_rate"],
                        "tokens_per_pass": record["tokens_per_pass"],
                        "identical_to_target_only": same if name == "coupled" else None,
                    }
                )
            rows = row_acceptance(target, draft, ids, records["target-only"]["tokens"], sampling)
            acceptance.append(
                {"prompt": f"{prompt.category} {prompt.source_id}", "temperature": temperature}
                | rows
            )
            print(acceptance[-1], flush=True)
    return {
        "load_seconds": load_seconds,
        "k": k,
        "runs": runs,
        "row_acceptance": acceptance,
        "row": row,
    }


def markdown(results: dict[str, object]) -> str:
    lines = [
        "# Coupled vs standard rule",
        "",
        f"Machine: {results['machine']['cpu']}, {results['machine']['cores']} cores; load "
        f"average {results['machine']['load_average_start']} at the start, "
        f"{results['machine']['load_average_end']} at the end (a shared, loaded machine: "
        "absolute timings are inflated).",
        "",
        f"## Sampler cost per position ({results['cost_row']} row of {VOCAB:,} entries, median "
        f"of {results['positions']} positions)",
        "",
        "| sampler | noise computed (ms) | noise cached (ms) |",
        "|---|---|---|",
    ]
    for name, cost in results["sampler_costs"].items():
        cached = f"{cost['cached_ms']:.3f}" if "cached_ms" in cost else "-"
        lines.append(f"| {name} | {cost['fresh_ms']:.3f} | {cached} |")
    lines += [
        "",
        f"## Toy Markov pairs (vocabulary 32, k = 4, {results['toy_tokens']} tokens, seed 2)",
        "",
        "| T | agreement | rule | acceptance | exact | tokens/pass | exact |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results["toy"]:
        lines.append(
            f"| {r['temperature']:g} | {r['agreement']:g} | {r['rule']} | {r['acceptance']:.3f} | "
            f"{r['expected_acceptance']:.3f} | {r['tokens_per_pass']:.3f} | "
            f"{r['expected_tokens_per_pass']:.3f} |"
        )
    if "qwen" in results:
        q = results["qwen"]
        lines += [
            "",
            f"## Qwen2.5-Coder 1.5B target, 0.5B draft, llama.cpp ({q.get('threads')} thread), "
            f"k = {q['k']} fixed, {q.get('tokens')} tokens, seed 3",
            "",
            "| prompt | T | run | tokens | tok/s | acceptance | tokens/pass | = target-only |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in q["runs"]:
            acc = "-" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.3f}"
            same = {None: "", True: "yes", False: "NO"}[r["identical_to_target_only"]]
            lines.append(
                f"| {r['prompt']} | {r['temperature']:g} | {r['run']} | {r['tokens']} | "
                f"{r['tokens_per_second']:.2f} | {acc} | {r['tokens_per_pass']:.2f} | {same} |"
            )
        names = [n for n in q["row_acceptance"][0] if n not in ("prompt", "temperature")]
        lines += [
            "",
            "Per-position acceptance on the rows of the target-only continuation (closed forms):",
            "",
            "| prompt | T | " + " | ".join(names) + " |",
            "|---|---|" + "---|" * len(names),
        ]
        for r in q["row_acceptance"]:
            values = " | ".join(f"{r[n]:.3f}" for n in names)
            lines.append(f"| {r['prompt']} | {r['temperature']:g} | {values} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-models", action="store_true", help="sampler cost and toy only")
    parser.add_argument("--positions", type=int, default=200)
    parser.add_argument("--toy-tokens", type=int, default=5000)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--temperatures", default="0.7,1.0")
    args = parser.parse_args()
    results: dict[str, object] = {"machine": machine(), "positions": args.positions}
    results["toy_tokens"] = args.toy_tokens
    results["toy"] = toy(args.toy_tokens)
    row = np.random.default_rng(0).dirichlet(np.full(VOCAB, 0.01))
    results["cost_row"] = "a Dirichlet(0.01)"
    if not args.no_models:
        temperatures = [float(t) for t in args.temperatures.split(",")]
        results["qwen"] = qwen(args.tokens, args.k, args.threads, temperatures)
        row = SamplingParams(0.7).warp(results["qwen"].pop("row"))
        results["cost_row"] = "a Qwen target row at T = 0.7,"
    results["sampler_costs"] = sampler_costs(row, args.positions)
    print(results["sampler_costs"], flush=True)
    write_results("coupled", results, markdown)


if __name__ == "__main__":
    main()
