"""The concurrent serving benchmark's arithmetic and report
(``bench/serving/concurrent_users.py``): per variant and client count, aggregate tokens/s, time
to first token (median, p95), the second user's first token, and identity of every answer with
the same request's solo answer."""

from __future__ import annotations

import math
import statistics


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) of ``values``, linear between the closest ranks (numpy's
    default: rank ``q/100 * (n - 1)`` of the sorted values); None when empty."""
    if not values:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"q must be within 0..100, got {q}")
    ordered = sorted(values)
    rank = q / 100 * (len(ordered) - 1)
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def identity(
    records: list[dict[str, object]], solo: dict[str, str]
) -> dict[str, dict[str, object]]:
    """Per sampling (greedy, seeded): how many of ``records`` streamed exactly the text of the
    same request alone (``solo[name]``), of how many, and which differed."""
    out: dict[str, dict[str, object]] = {}
    for record in records:
        row = out.setdefault(record["sampling"], {"same": 0, "total": 0, "differing": []})
        row["total"] += 1
        if record["text"] == solo[record["name"]]:
            row["same"] += 1
        else:
            row["differing"].append(record["name"])
    return out


def summarize_run(records: list[dict[str, object]]) -> dict[str, object]:
    """One run's figures: completion tokens over the wall time from the first request sent to
    the last answer's end (aggregate tokens/s), and time to first token's median and p95."""
    wall = max(r["ended"] for r in records) - min(r["sent"] for r in records)
    tokens = sum(r["completion_tokens"] or 0 for r in records)
    ttft = [r["ttft_s"] for r in records if r["ttft_s"] is not None]
    return {
        "requests": len(records),
        "completion_tokens": tokens,
        "wall_s": wall,
        "tokens_per_second": tokens / wall if wall > 0 else None,
        "ttft_median_s": statistics.median(ttft) if ttft else None,
        "ttft_p95_s": percentile(ttft, 95),
        "no_text": len(records) - len(ttft),
    }


def summarize(results: dict) -> dict[str, dict[str, dict[str, object]]]:
    """``summary[variant][clients]``: over the repeats, the median and range of each figure of
    :func:`summarize_run` and of the second user's first token, and identity of every answer
    against the variant's solo answers."""
    table: dict[str, dict[str, dict[str, object]]] = {}
    for name, by_clients in results["runs"].items():
        solo = {r["name"]: r["text"] for r in results["solo"][name]}
        for clients, runs in by_clients.items():
            repeats = runs if isinstance(runs, list) else [runs]  # written before --repeats
            figures = [summarize_run(run["records"]) for run in repeats]
            row: dict[str, object] = {"repeats": len(repeats)}
            for key in ("tokens_per_second", "ttft_median_s", "ttft_p95_s"):
                row[key], row[f"{key}_range"] = _median_and_range([f[key] for f in figures])
            row["no_text"] = sum(f["no_text"] for f in figures)
            row["second_user"] = _second_user_median(
                [probe for run in repeats for probe in run.get("second_users", [])]
                + [run["second_user"] for run in repeats if "second_user" in run]  # one a run
            )
            records = [record for run in repeats for record in run["records"]]
            row["identity"] = identity(records, solo)
            table.setdefault(name, {})[clients] = row
    return table


def _median_and_range(values: list[float | None]) -> tuple[float | None, list[float] | None]:
    known = [v for v in values if v is not None]
    if not known:
        return None, None
    return statistics.median(known), [min(known), max(known)]


def _second_user_median(probes: list[dict[str, object] | None]) -> dict[str, object] | None:
    """Every repeat's probes as one: the median first token, every probe's, and whether a long
    answer still streamed at the first token of every probe."""
    probes = [p for p in probes if p is not None]
    if not probes:
        return None
    seconds = sorted(p["ttft_s"] for p in probes)
    streaming = min(p["longs_streaming_at_first_token"] for p in probes)
    return {"ttft_s": statistics.median(seconds), "runs_s": seconds,
            "longs_streaming_at_first_token": streaming}  # fmt: skip


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _repeats_line(repeats: int) -> str:
    if repeats == 1:
        return ""
    return (
        f"Each figure is the median of {repeats} runs of each variant and client count (tok/s: "
        "with their range), the variants in a shuffled order each time. "
    )


def _rate(row: dict[str, object]) -> str:
    """The median tokens/s, with the repeats' range where there were several."""
    rate, span = row["tokens_per_second"], row.get("tokens_per_second_range")
    if rate is None:
        return "-"
    if row.get("repeats", 1) > 1 and span:
        return f"{rate:.1f} ({span[0]:.1f}-{span[1]:.1f})"
    return f"{rate:.1f}"


def _same(row: dict[str, object], sampling: str) -> str:
    counts = row["identity"].get(sampling)
    return "-" if counts is None else f"{counts['same']}/{counts['total']}"


def _second_user(probe: dict[str, object] | None) -> str:
    """The probe's first token in seconds, starred where no long answer still streamed then."""
    if probe is None:
        return "-"
    mark = "" if probe["longs_streaming_at_first_token"] else "*"
    return f"{probe['ttft_s']:.2f}{mark}"


def markdown(results: dict) -> str:
    """The report: the setup, one row per variant and client count, what differed, commands."""
    info, setup = results["machine"], results["setup"]
    counts = ", ".join(f"{n} {w}" for w, n in setup["workloads"].items())
    lines = [
        "## Concurrent serving (`python bench/serving/concurrent_users.py`)",
        "",
        f"{info['cpu']}, {info['cores']} cores (load average {info['load_average_start'][0]:.2f} "
        f"at start, {info['load_average_end'][0]:.2f} at end), threads {setup['threads']}, "
        f"{setup['slots']} slots a server (llama-server `-np {setup['slots']}` with `-c` "
        f"{setup['slots']} x {setup['ctx']}, prompt cache on; ours `--parallel "
        f"{setup['slots']}`), prompt seed {setup['seed']}. Requests: {counts} "
        f"({setup['requests']} in all, every other one greedy, the rest T = "
        f"{setup['temperature']} with a seed each), "
        f"{'exactly' if setup.get('ignore_eos') else 'at most'} {setup['tokens']} new tokens"
        f"{' (ignore_eos)' if setup.get('ignore_eos') else ''}, "
        "streamed through the official `openai` client; at every client count the same "
        "requests, taken from one queue by the clients (each sends its next when its last "
        "answer ended), on a fresh server per variant and client count.",
        "",
        _repeats_line(setup.get("repeats", 1))
        + "tok/s: completion tokens of all requests over the wall time from the first sent to the "
        "last answer's end. TTFT: time to the first streamed text. Second user: with N clients, "
        f"N - 1 long answers (code edits, up to {setup['probe_tokens']} tokens) stream and, "
        f"{setup['probe_delay']} s after every one of them holding a slot streamed text, a short "
        "question is sent: seconds to its first text (* where no long answer was streaming any "
        "more). Same as solo: answers (streamed text) equal to the same request's answer alone "
        "on a fresh server of the same variant.",
        "",
        "| variant | clients | tok/s | TTFT median s | TTFT p95 s | second user s | "
        "same as solo, greedy | same as solo, seeded |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, by_clients in results["summary"].items():
        for clients, row in by_clients.items():
            lines.append(
                f"| {name} | {clients} | {_rate(row)} | "
                f"{_seconds(row['ttft_median_s'])} | {_seconds(row['ttft_p95_s'])} | "
                f"{_second_user(row['second_user'])} | {_same(row, 'greedy')} | "
                f"{_same(row, 'seeded')} |"
            )
    lines += ["", *_differing(results["summary"])]
    if results.get("duration_s"):
        lines += ["", f"The whole run took {results['duration_s'] / 60:.1f} min."]
    lines += ["", "Commands (ports vary):", ""]
    lines += [f"- {name}: `{command}`" for name, command in results["commands"].items()]
    if results.get("llama_server"):
        lines += ["", f"llama-server binary: `{results['llama_server']}`."]
    return "\n".join(lines) + "\n"


def _differing(summary: dict[str, dict[str, dict[str, object]]]) -> list[str]:
    """The requests whose answer differed from their solo answer, per variant and client
    count; or a line saying none did."""
    lines = []
    for name, by_clients in summary.items():
        for clients, row in by_clients.items():
            names = [n for counts in row["identity"].values() for n in counts["differing"]]
            if names:
                lines.append(f"- {name}, {clients} clients, differing: {', '.join(names)}")
    return lines or ["Every answer equalled its solo answer."]
