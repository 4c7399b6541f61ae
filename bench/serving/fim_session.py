"""An editor's fill-in-the-middle session: ``POST /infill`` as code is typed, on a warm slot.

Each session types one HumanEval solution into existing code, line by line
(:func:`~bench.lib.broad_sets.typing_sessions`): for every line, in order, the editor asks for
it with the code above the cursor (``input_prefix``), the solution's lines below it
(``input_suffix``), nothing after the cursor on its line (``prompt``), greedy, ``n_predict``
``--tokens``, the prompt cache on, one request at a time, as llama.vim and llama.vscode send
them. Consecutive requests share the prefix up to the line typed since, so a server that keeps
its slot's cache reads only that line and the suffix again: unlike the broad evaluation's cold
gaps (``bench/speed/broad.py``), the answer, not the prompt, is most of a request's time.

Servers, one each for all sessions, each session run on every server in a shuffled order
(:func:`~bench.lib.repetitions.interleaved`): llama-server target-only (``-np 1``) and
``--spec-type ngram-simple``; ``spec-decode serve`` target-only (``--draft none``) and with its
defaults. Per request: seconds from sending it to its whole answer, at the client, and the text.
Reported: each server's seconds, tokens and tokens/s over all requests; ours over our
target-only per request (min, p10, median), the comparison that isolates speculation; each
server against llama-server target-only by tokens/s (the engines' answers may end at different
tokens); and each speculative server's texts against its own target-only.

    python bench/serving/fim_session.py --llama-server PATH --sessions 6 --seed 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.broad_sets import Gap, typing_sessions
from bench.lib.machine import machine
from bench.lib.repetitions import interleaved
from bench.lib.results import RESULTS, write_results
from bench.lib.serve_client import BASELINE, Variant, server_command
from bench.lib.servers import Server
from bench.lib.summaries import quantiles
from spec_decode.backends import assembly, registry

OURS, OURS_PLAIN, NGRAM = "ours default", "ours target-only", "llama-server ngram-simple"
VARIANTS = (
    Variant(BASELINE, "llama-server"),
    Variant(NGRAM, "llama-server", ("--spec-type", "ngram-simple")),
    Variant(OURS_PLAIN, "ours", ("--draft", "none")),
    Variant(OURS, "ours"),
)
#: Each speculative server's own target-only, for the identity of its texts.
PLAIN_OF = {NGRAM: BASELINE, OURS: OURS_PLAIN}
#: Seconds between two servers' sessions, so that neither's threads, still spinning, slow the
#: other's.
PAUSE_S = 1.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-server", help="the llama-server binary (required to run)")
    parser.add_argument("--sessions", type=int, default=6, help="HumanEval solutions typed")
    parser.add_argument("--seed", type=int, default=2, help="which solutions (tune on 0 or 1)")
    parser.add_argument("--tokens", type=int, default=64, help="n_predict of every request")
    parser.add_argument("--reps", type=int, default=1, help="runs of every session per server")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--port", type=int, default=18400, help="first port")
    parser.add_argument("--stem", default="fim_session")
    parser.add_argument("--render", action="store_true", help="only redraw STEM.md from STEM.json")
    args = parser.parse_args()
    if not args.render and args.llama_server is None:
        parser.error("--llama-server is required")
    if min(args.sessions, args.tokens, args.reps, args.threads) < 1:
        parser.error("--sessions, --tokens, --reps and --threads must be >= 1")
    return args


def infill(server: Server, gap: Gap, tokens: int) -> dict[str, object]:
    """One request as an editor sends it: seconds to the whole answer, its text and tokens."""
    body = {
        "input_prefix": gap.prefix,
        "input_suffix": gap.suffix,
        "input_extra": [],
        "prompt": "",
        "n_predict": tokens,
        "temperature": 0.0,
        "cache_prompt": True,
    }
    started = time.perf_counter()
    answer = server.post("/infill", body)
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "text": answer["content"],
            "tokens": int(answer.get("tokens_predicted", 0))}  # fmt: skip


def per_request(raw: dict, server: str, key: str) -> list[float]:
    """``key`` of every request of every session on ``server``, the median over repetitions."""
    values = []
    for by_server in raw.values():
        runs = by_server[server]
        for i in range(len(runs[0]["requests"])):
            values.append(statistics.median(run["requests"][i][key] for run in runs))
    return values


def summary(raw: dict) -> dict[str, dict[str, object]]:
    """Per server: seconds, tokens and tokens/s over all requests, and the ratios the docstring
    lists (between engines by tokens/s: their answers may end at different tokens)."""
    seconds = {name: per_request(raw, name, "seconds") for name in (v.name for v in VARIANTS)}
    tokens = {name: sum(per_request(raw, name, "tokens")) for name in seconds}
    found: dict[str, dict[str, object]] = {}
    rate = {name: tokens[name] / sum(times) for name, times in seconds.items()}
    for name, times in seconds.items():
        found[name] = {
            "requests": len(times),
            "seconds": sum(times),
            "tokens": tokens[name],
            "tokens_per_second": rate[name],
            "over llama-server target-only": rate[name] / rate[BASELINE],
        }
    speedups = [b / a for a, b in zip(seconds[OURS], seconds[OURS_PLAIN], strict=True)]
    found[OURS]["over ours target-only"] = sum(seconds[OURS_PLAIN]) / sum(seconds[OURS])
    found[OURS]["per request over ours target-only"] = quantiles(speedups)
    for name, plain in PLAIN_OF.items():
        found[name]["identical"] = _same_texts(raw, name, plain)
    return found


def _same_texts(raw: dict, name: str, plain: str) -> list[int]:
    """[requests whose every run's text equals the target-only's first run's, requests]."""
    same = total = 0
    for by_server in raw.values():
        reference = by_server[plain][0]["requests"]
        for i, request in enumerate(reference):
            total += 1
            same += all(run["requests"][i]["text"] == request["text"] for run in by_server[name])
    return [same, total]


def markdown(results: dict) -> str:
    info, found = results["machine"], summary(results["raw"])
    lines = [
        "## An editor's fill-in-the-middle session (`python bench/serving/fim_session.py`)",
        "",
        f"{info['cpu']}, {info['cores']} cores, {results['threads']} threads. "
        f"{results['sessions']} HumanEval solutions (seed {results['seed']}) typed line by line "
        f"into existing code: {found[BASELINE]['requests']} `/infill` requests, one at a time, "
        f"greedy, `n_predict` {results['tokens']}, prompt cache on, one server each for all "
        f"sessions (one slot), every session run on every server in a shuffled order, "
        f"{results['reps']} run(s) each. Seconds: from sending a request to its whole answer, "
        "summed over the requests; tok/s: the tokens answered over those seconds (the engines' "
        "answers may end at different tokens: llama-server's `/infill` ends some earlier).",
        "",
        "| server | seconds | tokens | tok/s | tok/s over llama-server target-only | "
        "identical to its target-only |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in found.items():
        same = row.get("identical")
        same = f"{same[0]}/{same[1]}" if same else ""
        lines.append(
            f"| {name} | {row['seconds']:.1f} | {row['tokens']} | "
            f"{row['tokens_per_second']:.1f} | {row['over llama-server target-only']:.2f}x | "
            f"{same} |"
        )
    ours = found[OURS]
    q = ours["per request over ours target-only"]
    lines += [
        "",
        f"- {OURS} over {OURS_PLAIN} (the same engine without speculation): "
        f"{ours['over ours target-only']:.2f}x over all requests; per request min "
        f"{q['min']:.2f}x, p10 {q['p10']:.2f}x, median {q['median']:.2f}x.",
        f"- The whole run took {results['minutes']:.1f} min.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    args = parse_args()
    if args.render:
        results = json.loads((RESULTS / f"{args.stem}.json").read_text())
        (RESULTS / f"{args.stem}.md").write_text(markdown(results))
        return
    sessions = {gaps[0].source_id.split(" line")[0]: gaps
                for gaps in typing_sessions(args.sessions, args.seed)}  # fmt: skip
    target = assembly.gguf_file(registry.DEFAULT_TARGET)
    logs = Path(tempfile.mkdtemp(prefix="fim-session-"))
    servers = {}
    for i, variant in enumerate(VARIANTS):
        command = server_command(
            variant,
            target=target,
            port=args.port + i,
            threads=args.threads,
            ctx=8192,
            llama_server=args.llama_server,
            ours_command="spec-decode serve",
        )
        servers[variant.name] = Server(command, args.port + i, logs / f"{i}.log")

    def session(name: str, server: str, rep: int) -> dict[str, object]:
        time.sleep(PAUSE_S)
        requests = [infill(servers[server], gap, args.tokens) for gap in sessions[name]]
        seconds = sum(r["seconds"] for r in requests)
        generated = sum(r["tokens"] for r in requests)
        return {"requests": requests, "seconds": seconds, "generated": generated}

    started = time.perf_counter()
    try:
        for server in servers.values():
            server.start()
        raw = interleaved(list(sessions), lambda _: list(servers), args.reps, session)
    finally:
        for server in servers.values():
            server.stop()
    results = {"machine": machine(), "command": " ".join(sys.argv), "sessions": args.sessions,
               "seed": args.seed, "tokens": args.tokens, "reps": args.reps,
               "threads": args.threads, "minutes": (time.perf_counter() - started) / 60,
               "summary": summary(raw), "raw": raw}  # fmt: skip
    write_results(args.stem, results, markdown)


if __name__ == "__main__":
    main()
