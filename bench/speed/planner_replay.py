"""auto's choices replayed on real greedy answers, priced on the calibrated curve, beside the
oracle ceiling: deterministic, seconds per variant once the answers are collected.

``collect`` decodes the public prompt sets target-only (greedy, in process, on the packaged target),
exactly as ``bench/serving/serve.py`` sends them (code-edit sessions re-send the conversation with
the model's own answers, MT-bench both turns, HumanEval raw completions), and stores every turn's
prompt ids and answer ids with the calibrated curve. ``replay`` runs the default auto planner over
them (:func:`spec_decode.drafting.replay.replay_greedy`; the shared history fed as a server feeds
it) and reports, per set: tokens per one-token pass on the curve, plain passes, block sizes; beside
them the hindsight bound (the best any planner over these drafters could do, knowing the answer) and
the oracle's (every block drafted right, sizes chosen by dynamic programming). Greedy output does
not depend on the planner, so the replay is what the server would do.

    python bench/speed/planner_replay.py collect --seed 1 --out /tmp/answers_seed1.json
    python bench/speed/planner_replay.py replay /tmp/answers_seed1.json

``collect-broad`` collects the broad evaluation's cases instead (``bench/speed/broad.py``: each
prompt new to the engine, so each is replayed with a history of its own): tune the planner there
on seeds 0 and 1, and report ``broad.py`` on another seed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.results import RESULTS
from bench.lib.summaries import quantiles
from spec_decode.core.checks import leading_matches
from spec_decode.drafting.auto import auto_planner
from spec_decode.drafting.costs import CostCurve
from spec_decode.drafting.lookup import recurring_suffix
from spec_decode.drafting.replay import hindsight_cost, oracle_cost, passes_cost, replay_greedy
from spec_decode.drafting.suffix import SuffixHistory
from spec_decode.serving.request import RequestOptions


def collect(args: argparse.Namespace) -> None:
    from bench.lib.prompt_sets import code_edit_sessions, humaneval, mtbench_conversations
    from spec_decode.core.sampling import SamplingParams
    from spec_decode.serving.config import EngineConfig
    from spec_decode.serving.engine import Engine

    engine = Engine.load(EngineConfig(threads=args.threads))
    greedy = SamplingParams(temperature=0)
    turns = []
    sessions = code_edit_sessions(args.code_edit, args.seed, args.turns) + mtbench_conversations(
        args.mtbench, args.seed
    )
    for session in sessions:
        messages: list[dict[str, str]] = []
        for number, text in enumerate(session.turns):
            messages.append({"role": "user", "content": text})
            request = engine.prepare(
                messages, RequestOptions(sampling=greedy, target_only=True), max_tokens=args.tokens
            )
            ids = list(request.prompt)
            done = engine.generate(request)
            messages.append({"role": "assistant", "content": done.text})
            turns.append(
                {
                    "set": session.category,
                    "case": session.source_id,
                    "turn": number,
                    "prompt": ids,
                    "answer": list(done.tokens),
                }
            )
            print(session.category, session.source_id, number, len(ids), len(done.tokens))
    for prompt in humaneval(args.humaneval, args.seed):
        request = engine.prepare(
            prompt.text,
            RequestOptions(sampling=greedy, target_only=True),
            max_tokens=args.tokens,
            raw=True,
        )
        ids = list(request.prompt)
        done = engine.generate(request)
        turns.append(
            {
                "set": "humaneval",
                "case": prompt.source_id,
                "turn": 0,
                "prompt": ids,
                "answer": list(done.tokens),
            }
        )
    write_answers(engine.costs, turns, args.out, shared_history=True)


def collect_broad(args: argparse.Namespace) -> None:
    """The broad evaluation's cases (``bench/speed/broad.py``'s, ``--per-workload`` of each
    workload, ``--seed``), each a prompt new to the engine, answered target-only and greedy."""
    from bench.lib.broad_sets import SETS, prompt_ids
    from spec_decode.core.sampling import SamplingParams
    from spec_decode.serving.config import EngineConfig
    from spec_decode.serving.engine import Engine

    engine = Engine.load(EngineConfig(threads=args.threads))
    options = RequestOptions(sampling=SamplingParams(temperature=0), target_only=True)
    turns = []
    for workload, cases in SETS.items():
        for case in cases(args.per_workload, args.seed):
            ids = prompt_ids(engine, case)
            engine.forget()
            done = engine.generate(engine.prepare(ids, options, max_tokens=args.tokens))
            turns.append(
                {"set": workload, "case": case.source_id, "turn": 0, "prompt": ids,
                 "answer": list(done.tokens)}
            )  # fmt: skip
            print(workload, case.source_id, len(ids), len(done.tokens), flush=True)
    write_answers(engine.costs, turns, args.out, shared_history=False)


def write_answers(costs: CostCurve, turns: list[dict], out: str, shared_history: bool) -> None:
    """The answers with the engine's calibrated curve, and whether the turns are replayed
    with one suffix history (a server's sessions) or each alone (the broad cases)."""
    curve = {"sizes": costs.sizes, "seconds": costs.seconds}
    payload = {"curve": curve, "shared_history": shared_history, "turns": turns}
    Path(out).write_text(json.dumps(payload))


def copy_candidates(context: list[int], proposals: list[list[int]], depth: int) -> list[list[int]]:
    """Every copy continuation of ``context``, most recent first: the drafters' ``proposals``,
    then what followed each earlier occurrence of the longest recurring suffix of 2 to 8
    tokens, up to ``depth`` tokens each, duplicates dropped."""
    found: list[list[int]] = [list(p[:depth]) for p in proposals if p]
    n, starts = recurring_suffix(context, 2, 8)
    found += [context[h + n : h + n + depth] for h in reversed(starts.tolist())]
    unique: dict[tuple[int, ...], None] = {}
    for candidate in found:
        if candidate:
            unique.setdefault(tuple(candidate))
    return [list(c) for c in unique]


def tree_hindsight_cost(
    drafters: dict,
    prompt: list[int],
    answer: list[int],
    costs: CostCurve,
    k_max: int,
    widths: tuple[int, ...] = (1, 2, 4, 8),
) -> float:
    """:func:`~spec_decode.drafting.replay.hindsight_cost` where a step may verify a token tree:
    the trie of the first w copy candidates (:func:`copy_candidates`, w in ``widths``) cut at
    depth k, scored in one pass of (its nodes + 1) rows, emitting the longest candidate prefix
    the answer follows plus one. What a tree of diverging copies could add to a chain, at best."""
    n = len(answer)
    best = [0.0] * (n + 1)
    for done in range(n - 1, -1, -1):
        context = [*prompt, *answer[:done]]
        depth = min(k_max, n - done - 1)
        proposals = [d.propose_tokens(context, depth) for d in drafters.values()]
        candidates = copy_candidates(context, proposals, depth)
        cheapest = 1.0 + best[done + 1]
        for width in widths:
            chosen = candidates[:width]
            matched = [leading_matches(c, answer[done : done + len(c)]) for c in chosen]
            for k in range(1, depth + 1):
                nodes = len({tuple(c[:i]) for c in chosen for i in range(1, min(k, len(c)) + 1)})
                if nodes + 1 > costs.sizes[-1]:
                    break
                emitted = min(k, max(matched, default=0)) + 1
                cheapest = min(cheapest, costs.relative(nodes + 1) + best[done + emitted])
            if width >= len(candidates):
                break
        best[done] = cheapest
    return best[0]


#: What a replayed case's cost is compared for: the planner's, and its two bounds.
WHATS = ("ours", "hindsight", "oracle")


def speedups(rows: list[dict], what: str) -> list[float]:
    """Each case's speedup over target-only decoding on the curve, for ``what``'s cost: its
    tokens and prompt reading over ``what``'s passes and the same prompt reading."""
    return [
        (row["tokens"] + row["prompt_passes"]) / (row[what] + row["prompt_passes"]) for row in rows
    ]


def replay(args: argparse.Namespace) -> None:
    data = json.loads(Path(args.answers).read_text())
    costs = CostCurve(tuple(data["curve"]["sizes"]), tuple(data["curve"]["seconds"]))
    k_max = min(args.k_max, costs.sizes[-1] - 1)
    shared = data.get("shared_history", True)
    history = SuffixHistory()
    rows = []
    for turn in data["turns"]:
        if not shared:
            history = SuffixHistory()
        planner = auto_planner(costs, args.vocab, k_max=k_max, history=history)
        drafters = planner.drafters
        trace = replay_greedy(planner, turn["prompt"], turn["answer"], k_max)
        hindsight = hindsight_cost(drafters, turn["prompt"], turn["answer"], costs, k_max)
        tree = (
            tree_hindsight_cost(drafters, turn["prompt"], turn["answer"], costs, k_max)
            if args.tree
            else hindsight
        )
        history.add(turn["prompt"] + turn["answer"])
        # a broad case's prompt is read from an empty cache, as broad.py times it; a session's
        # is mostly cached: its speedups leave the prompt out
        prompt = 0.0 if shared else costs.relative(len(turn["prompt"]))
        blocks = [d for d in trace.drafted_lengths if d]
        rows.append(
            {
                "set": turn["set"],
                "case": turn["case"],
                "turn": turn["turn"],
                "tokens": len(turn["answer"]),
                "passes": trace.target_passes,
                "plain_passes": trace.target_passes - len(blocks),
                "blocks": blocks,
                "ours": passes_cost(trace, costs),
                "hindsight": hindsight,
                "tree_hindsight": tree,
                "oracle": oracle_cost(len(turn["answer"]), costs, k_max + 1),
                "prompt_passes": prompt,
            }
        )
        if args.verbose:
            row = rows[-1]
            print(
                f"{row['set']:10s} {row['case']:18s} t{row['turn']} {row['tokens']:4d} tokens: "
                f"{row['tokens'] / row['ours']:.2f} a pass (hindsight "
                f"{row['tokens'] / hindsight:.2f}, tree {row['tokens'] / tree:.2f}, "
                f"oracle {row['tokens'] / row['oracle']:.2f}); "
                f"{row['plain_passes']} plain of {row['passes']}, blocks {blocks}"
            )
    summary = {}
    for name in dict.fromkeys(row["set"] for row in rows):
        mine = [row for row in rows if row["set"] == name]
        tokens = sum(row["tokens"] for row in mine)
        summary[name] = {
            what: tokens / sum(row[what] for row in mine)
            for what in ("ours", "hindsight", "tree_hindsight", "oracle")
        } | {"turns": len(mine), "plain_passes": sum(row["plain_passes"] for row in mine)}
        figures = summary[name]
        figures["speedups"] = {what: quantiles(speedups(mine, what)) for what in WHATS}
        print(
            f"{name:10s} {len(mine)} turns: {figures['ours']:.3f} tokens a one-token pass "
            f"(hindsight {figures['hindsight']:.3f}, with trees {figures['tree_hindsight']:.3f}, "
            f"oracle {figures['oracle']:.3f}), "
            f"{figures['plain_passes']} plain passes; per case, min/p10/median: "
            + ", ".join(
                f"{what} " + "/".join(f"{v:.2f}" for v in figures["speedups"][what].values())
                for what in WHATS
            )
        )
    if args.stem:
        payload = {"answers": args.answers, "k_max": k_max, "summary": summary, "turns": rows}
        (RESULTS / f"{args.stem}.json").write_text(json.dumps(payload, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    c = commands.add_parser("collect")
    c.add_argument("--code-edit", type=int, default=2)
    c.add_argument("--turns", type=int, default=4)
    c.add_argument("--mtbench", type=int, default=3)
    c.add_argument("--humaneval", type=int, default=3)
    c.add_argument("--tokens", type=int, default=192)
    c.add_argument("--threads", type=int, default=2)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--out", required=True)
    b = commands.add_parser("collect-broad")
    b.add_argument("--per-workload", type=int, default=10)
    b.add_argument("--tokens", type=int, default=128)
    b.add_argument("--threads", type=int, default=2)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--out", required=True)
    r = commands.add_parser("replay")
    r.add_argument("answers")
    r.add_argument("--k-max", type=int, default=63)
    r.add_argument("--vocab", type=int, default=151936)
    r.add_argument("--verbose", "-v", action="store_true")
    r.add_argument("--stem", help="write bench/results/STEM.json")
    r.add_argument("--tree", action="store_true", help="also the hindsight bound with trees")
    args = parser.parse_args()
    {"collect": collect, "collect-broad": collect_broad, "replay": replay}[args.command](args)


if __name__ == "__main__":
    main()
