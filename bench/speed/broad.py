"""Fast on any prompt? Per-prompt speedup over a broad public sample, in four workloads.

For every case of :mod:`bench.lib.broad_sets` (HumanEval completions, MT-bench first turns,
HumanEval code edits of four kinds, fill-in-the-middle gaps cut from HumanEval solutions), on the
packaged target and the build spec-decode loads, greedy, ``--tokens`` at most:

* ours, speculative (``serve``'s defaults: the auto policy, the coupled rule) and target-only, in
  one engine, each run from an empty KV cache and with no shared history (every prompt is new to
  the engine), ``--repeats`` runs of each, alternating, which comes first alternating from case
  to case; the speedup is the ratio of their tokens/s at the median run's seconds, prompt
  reading included in both;
* llama-server ``--spec-type ngram-simple`` (one slot, prompt cache off) on the same prompt token
  ids through ``/completion``: its tokens/s over prompt and generation, and ours over it.

Per workload: the speedup's min, p10 and median, the share of cases below 1.0x and 0.97x (and
below 1.0x among the cases where something was drafted: what speculation cost), tokens per target
pass, plain passes and identity with target-only, and ours over llama-server. Where nothing was
drafted both modes make the same target passes, so their measured ratio is the machine's noise:
its range over those cases is reported as the noise floor the other figures sit on.

Tune the planner on seed 0 or 1 (as ``bench/speed/planner_replay.py`` does); report on another:

    python bench/speed/broad.py --llama-server .../build/bin/llama-server --per-workload 10 --seed 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib import broad_sets
from bench.lib.machine import machine
from bench.lib.results import write_results
from bench.lib.servers import Server
from bench.lib.summaries import quantiles
from spec_decode.backends.registry import DEFAULT_TARGET
from spec_decode.core.sampling import SamplingParams
from spec_decode.serving.completion import speculative_figures
from spec_decode.serving.config import EngineConfig
from spec_decode.serving.engine import Engine
from spec_decode.serving.request import RequestOptions

#: Seconds between llama-server's runs and ours.
PAUSE_S = 1.0


def ours(engine: Engine, ids: list[int], tokens: int, repeats: int, first: int) -> dict:
    """Speculative and target-only decoding of ``ids``, ``repeats`` times each, alternating
    (speculative first when ``first`` is even), each run from an empty cache: per mode the
    first run's tokens and figures, every run's seconds, and tokens/s at their median."""
    request = engine.prepare(ids, RequestOptions(SamplingParams(0.0)), max_tokens=tokens)
    modes = {"speculative": request, "target-only": request.target_only()}
    order = list(modes) if first % 2 == 0 else list(modes)[::-1]
    runs: dict[str, dict] = {}
    for _ in range(repeats):
        for label in order:
            engine.forget()
            done = engine.generate(modes[label])
            if label not in runs:
                figures = speculative_figures(done.trace)
                runs[label] = {"tokens": done.tokens, "seconds_each": [], "same": True, **figures}
            run = runs[label]
            run["seconds_each"].append(done.seconds)
            run["same"] &= done.tokens == run["tokens"]  # every repeat
    for run in runs.values():
        run["seconds"] = statistics.median(run["seconds_each"])
        run["tokens_per_second"] = len(run["tokens"]) / run["seconds"]
    return runs


def llama_ngram(server: Server, ids: list[int], tokens: int) -> dict:
    """llama-server's ngram-simple answer to ``ids``: greedy, no prompt cache; a pause before
    and after, so that neither process's threads, still spinning, slow the other's run."""
    time.sleep(PAUSE_S)
    answer = server.post(
        "/completion",
        {"prompt": ids, "n_predict": tokens, "temperature": 0.0, "cache_prompt": False,
         "return_tokens": True},
    )  # fmt: skip
    time.sleep(PAUSE_S)
    timing = answer["timings"]
    seconds = (timing["prompt_ms"] + timing["predicted_ms"]) / 1000
    return {
        "tokens": answer.get("tokens", []),
        "seconds": seconds,
        "tokens_per_second": timing["predicted_n"] / seconds,
        "draft_n": timing.get("draft_n"),
        "draft_n_accepted": timing.get("draft_n_accepted"),
    }


def measure(args: argparse.Namespace, engine: Engine, server: Server | None) -> list[dict]:
    """Every case of every workload, ours and llama-server's, in the workloads' order."""
    cases = []
    for workload in args.workloads.split(","):
        for case in broad_sets.SETS[workload](args.per_workload, args.seed):
            ids = broad_sets.prompt_ids(engine, case)
            record = {"workload": workload, "case": case.source_id, "prompt_tokens": len(ids)}
            record |= ours(engine, ids, args.tokens, args.repeats, first=len(cases))
            if server is not None:
                record["llama-server ngram-simple"] = llama_ngram(server, ids, args.tokens)
            cases.append(record)
            spec, base = record["speculative"], record["target-only"]
            speedup = spec["tokens_per_second"] / base["tokens_per_second"]
            print(f"{workload} {case.source_id}: {speedup:.2f}x, {len(spec['tokens'])} tokens, "
                  f"{spec['target_passes']} passes", flush=True)  # fmt: skip
    return cases


def summary(cases: list[dict]) -> dict[str, dict]:
    """Per workload: the speedup's distribution, passes, identity, and ours over llama-server."""
    table = {}
    for workload in dict.fromkeys(c["workload"] for c in cases):
        rows = [c for c in cases if c["workload"] == workload]
        speedups = [_speedup(c) for c in rows]
        entry = {
            "cases": len(rows),
            "speedup": quantiles(speedups),
            "slower_than_1": sum(s < 1.0 for s in speedups) / len(rows),
            "slower_than_0_97": sum(s < 0.97 for s in speedups) / len(rows),
            "drafted": sum(map(_drafted, rows)),
            "drafted_slower_than_1": sum(
                s < 1.0 for s, c in zip(speedups, rows, strict=True) if _drafted(c)
            ),
            "tokens_per_pass_median": statistics.median(
                c["speculative"]["tokens_per_pass"] for c in rows
            ),
            "plain_pass_share_median": statistics.median(
                c["speculative"]["plain_passes"] / c["speculative"]["target_passes"] for c in rows
            ),
            "identical": sum(_identical(c) for c in rows),
        }
        llama = [c["llama-server ngram-simple"] for c in rows if "llama-server ngram-simple" in c]
        if llama:
            over = [
                c["speculative"]["tokens_per_second"] / c["llama-server ngram-simple"][
                    "tokens_per_second"]
                for c in rows
            ]  # fmt: skip
            entry["over_llama_ngram"] = quantiles(over)
            entry["llama_ngram_identical"] = sum(
                c["llama-server ngram-simple"]["tokens"] == c["target-only"]["tokens"] for c in rows
            )
        table[workload] = entry
    return table


def _speedup(case: dict) -> float:
    return case["speculative"]["tokens_per_second"] / case["target-only"]["tokens_per_second"]


def _drafted(case: dict) -> bool:
    """Whether speculation fed a block on this case (else both modes made the same passes)."""
    return bool(case["speculative"]["blocks_by_length"])


def noise_floor(cases: list[dict]) -> dict[str, float] | None:
    """The measured speedup's min, median and max over the cases where nothing was drafted:
    the same work timed twice, so the spread is the machine's (None without such cases)."""
    same_work = [_speedup(c) for c in cases if not _drafted(c)]
    if not same_work:
        return None
    return {"cases": len(same_work), "min": min(same_work), "median": statistics.median(same_work),
            "max": max(same_work)}  # fmt: skip


def _identical(case: dict) -> bool:
    """Speculative tokens equal target-only's, and every repeat of each equal its first."""
    spec, base = case["speculative"], case["target-only"]
    return spec["tokens"] == base["tokens"] and spec.get("same", True) and base.get("same", True)


def markdown(results: dict) -> str:
    head = (
        f"# Broad evaluation, seed {results['seed']}, {results['tokens']} tokens at most,"
        " greedy\n\n"
        f"Machine: {results['machine']['cpu']}, {results['machine']['cores']} cores. "
        f"Command: `{results['command']}`\n\n"
        "| workload | cases | speedup min | p10 | median | < 1.0x | < 0.97x | drafted | "
        "< 1.0x when drafted | tokens/pass | plain passes | identical | "
        "over llama ngram: min | p10 | median |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for workload, e in results["summary"].items():
        s, o = e["speedup"], e.get("over_llama_ngram")
        llama = f"{o['min']:.2f}x | {o['p10']:.2f}x | {o['median']:.2f}x" if o else "- | - | -"
        lines.append(
            f"| {workload} | {e['cases']} | {s['min']:.2f}x | {s['p10']:.2f}x | {s['median']:.2f}x "
            f"| {e['slower_than_1']:.0%} | {e['slower_than_0_97']:.0%} | {e['drafted']} | "
            f"{e['drafted_slower_than_1']} | {e['tokens_per_pass_median']:.2f} | "
            f"{e['plain_pass_share_median']:.0%} | "
            f"{e['identical']}/{e['cases']} | {llama} |"
        )
    noise = results.get("noise_floor")
    tail = (
        f"\nNoise floor: on the {noise['cases']} cases where nothing was drafted (both modes made "
        f"the same target passes) the measured speedup ran from {noise['min']:.2f}x to "
        f"{noise['max']:.2f}x (median {noise['median']:.2f}x).\n"
        if noise
        else ""
    )
    return head + "\n".join(lines) + "\n" + tail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-server", type=Path, help="llama-server binary (none: ours only)")
    parser.add_argument("--workloads", default=",".join(broad_sets.WORKLOADS))
    parser.add_argument("--per-workload", type=int, help="cases per workload (default: all)")
    parser.add_argument("--seed", type=int, default=2, help="the sample (0, 1 tuned the planner)")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each mode per case")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--port", type=int, default=8093)
    args = parser.parse_args()
    engine = Engine.load(EngineConfig(shared_history=False, threads=args.threads))
    engine.warm_up()
    server = None
    if args.llama_server is not None:
        target = engine.target.model.path
        command = [str(args.llama_server), "-m", str(target), "-t", str(args.threads), "-c",
                   "4096", "-np", "1", "--port", str(args.port), "--no-webui",
                   "--spec-type", "ngram-simple"]  # fmt: skip
        server = Server(command, args.port, Path(tempfile.mkdtemp()) / "llama-server.log")
        server.start()
    try:
        cases = measure(args, engine, server)
    finally:
        if server is not None:
            server.stop()
    results = {
        "seed": args.seed, "tokens": args.tokens, "target": DEFAULT_TARGET,
        "command": " ".join(["python bench/speed/broad.py", *sys.argv[1:]]),
        "machine": machine(), "summary": summary(cases), "noise_floor": noise_floor(cases),
        "cases": cases,
    }  # fmt: skip
    write_results(f"broad_seed{args.seed}", results, markdown)


if __name__ == "__main__":
    main()
