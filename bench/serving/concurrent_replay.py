"""How much copying could add with several users at once: the concurrent benchmark's requests
replayed on the calibrated curve, target-only, with the server's planners, and in hindsight.

``bench/serving/concurrent_users.py`` measures the server; this says how far any planner over
the same copy drafters could go on this machine's curve, which the measurement cannot. For every
seed, the requests ``concurrent_users.py --seed SEED`` sends (all greedy here: a replay needs the
answer) are answered target-only in process, exactly 128 tokens each as with ``--ignore-eos``;
then ``bench/lib/shared_replay.py`` replays them taken by ``--clients`` slots at once: the rate on
the curve target-only, with the server's joint planner, and in hindsight (the best those
drafters could do beside each other, knowing the answers).

    python bench/serving/concurrent_replay.py --seeds 201,202,203,204,205,206 --clients 1,4

Run it alone: the engine checks its stored curve against a pass timed as it loads, and measures
the curve again when that pass is off, which on a busy machine gives a disturbed curve.
``--answers FILE`` keeps the answers and the curve, so the replays can run again without a model.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.concurrent_client import workload_requests
from bench.lib.machine import machine
from bench.lib.results import write_results
from bench.lib.shared_replay import PLANS, replay_shared
from bench.lib.summaries import quantiles
from spec_decode.drafting.costs import CostCurve


def answers(seeds: list[int], counts: dict[str, int], tokens: int, threads: int) -> dict:
    """Every seed's requests with their greedy answers (prompt and answer ids), with the
    engine's calibrated curve, its k and its vocabulary size."""
    from spec_decode.core.sampling import SamplingParams
    from spec_decode.serving.config import EngineConfig
    from spec_decode.serving.engine import Engine
    from spec_decode.serving.request import RequestOptions

    engine = Engine.load(EngineConfig(threads=threads))
    greedy = RequestOptions(
        sampling=SamplingParams(temperature=0), target_only=True, ignore_eos=True
    )
    found = {}
    for seed in seeds:
        found[seed] = []
        for request in workload_requests(counts, seed, 0.0):
            body = request.body.get("messages") or request.body["prompt"]
            prepared = engine.prepare(body, greedy, max_tokens=tokens, raw="prompt" in request.body)
            done = engine.generate(prepared)
            found[seed].append((list(prepared.prompt), list(done.tokens)))
            print(f"seed {seed} {request.name}: {len(prepared.prompt)} + {len(done.tokens)}")
    costs = engine.costs
    return {
        "curve": {"sizes": costs.sizes, "seconds": costs.seconds},
        "k": engine.k,
        "vocab": engine.target.model.vocab_size,
        "answers": {str(seed): cases for seed, cases in found.items()},
    }


def markdown(results: dict) -> str:
    setup, info = results["setup"], results["machine"]
    lines = [
        "## Several users, replayed: what copying could add "
        "(`python bench/serving/concurrent_replay.py`)",
        "",
        f"{info['cpu']}, {info['cores']} cores; the calibrated curve (a 4-row call "
        f"{results['curve_x'][3]:.2f} one-token passes, 16 rows {results['curve_x'][15]:.2f}); "
        f"seeds {', '.join(map(str, setup['seeds']))}, each {setup['requests']} requests "
        f"({setup['workloads']}), greedy, {setup['tokens']} tokens each, k up to {setup['k']}. "
        "Tokens a second on the curve over target-only's, per seed: min / p10 / median.",
        "",
        "| clients | planner | hindsight | target-only tok/s on the curve, median |",
        "|---|---|---|---|",
    ]
    for clients, row in results["by_clients"].items():
        cells = [
            " / ".join(f"{v:.3f}x" for v in row[plan].values()) for plan in ("planner", "hindsight")
        ]
        lines.append(f"| {clients} | {cells[0]} | {cells[1]} | {row['target_rate']:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="201,202,203,204,205,206")
    parser.add_argument("--clients", default="1,4")
    parser.add_argument("--code-edit", type=int, default=3)
    parser.add_argument("--mtbench", type=int, default=3)
    parser.add_argument("--humaneval", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--stem", default="concurrent_replay")
    parser.add_argument("--answers", help="a JSON file of answers: read if it exists, else written")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    counts = {"code-edit": args.code_edit, "mtbench": args.mtbench, "humaneval": args.humaneval}
    info = machine()
    cached = Path(args.answers) if args.answers else None
    if cached is not None and cached.exists():
        collected = json.loads(cached.read_text())
    else:
        collected = answers(seeds, counts, args.tokens, args.threads)
        if cached is not None:
            cached.write_text(json.dumps(collected))
    curve, k, vocab = collected["curve"], collected["k"], collected["vocab"]
    costs = CostCurve(tuple(curve["sizes"]), tuple(curve["seconds"]))
    found = {int(seed): cases for seed, cases in collected["answers"].items()}
    by_clients, runs = {}, []
    for clients in (int(c) for c in args.clients.split(",")):
        ratios: dict[str, list[float]] = {plan: [] for plan in PLANS[1:]}
        rates = []
        for seed in seeds:
            replays = {p: replay_shared(found[seed], clients, costs, p, k, vocab) for p in PLANS}
            base = replays["target-only"].rate
            rates.append(base)
            for plan in PLANS[1:]:
                ratios[plan].append(replays[plan].rate / base)
            runs.append(
                {"clients": clients, "seed": seed}
                | {p: vars(r) | {"rate": r.rate} for p, r in replays.items()}
            )
            print(f"{clients} clients, seed {seed}: "
                  + ", ".join(f"{p} {r.rate:.1f} tok/s" for p, r in replays.items()))  # fmt: skip
        by_clients[str(clients)] = {plan: quantiles(v) for plan, v in ratios.items()} | {
            "target_rate": quantiles(rates)["median"]
        }
    results = {
        "machine": info,
        "setup": {
            "seeds": seeds,
            "requests": sum(counts.values()),
            "workloads": counts,
            "tokens": args.tokens,
            "k": k,
            "threads": args.threads,
        },
        "curve_x": [costs.relative(n) for n in range(1, 65)],
        "by_clients": by_clients,
        "runs": runs,
    }
    write_results(args.stem, results, markdown)


if __name__ == "__main__":
    main()
