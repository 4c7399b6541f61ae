"""The serving benchmark's report: per workload and variant, medians over repetitions and counts
summed (:func:`summarize`), greedy identity against each variant's own target-only
(:func:`identity`), the markdown and the plot."""

from __future__ import annotations

import statistics

from bench.lib.results import RESULTS
from bench.lib.serve_client import BASELINE, NGRAM, WORKLOADS


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
        for name in results["references"]:
            records = [r for case in cases for r in enumerate(results["runs"][case].get(name, []))]
            if records:
                table.setdefault(workload, {})[name] = _row(records)
    return table


def _row(records: list[tuple[int, dict]]) -> dict[str, object]:
    """One variant's figures over ``records``: (repetition, session record) pairs."""
    per_rep: dict[int, dict[str, float]] = {}
    turns = []
    for rep, record in records:
        sums = per_rep.setdefault(rep, {"seconds": 0.0, "gen_tokens": 0, "gen_s": 0.0})
        sums["seconds"] += record["seconds"]
        for turn in record["turns"]:
            turns.append(turn)
            if turn["generation_s"] and turn["completion_tokens"] > 1:
                sums["gen_tokens"] += turn["completion_tokens"] - 1
                sums["gen_s"] += turn["generation_s"]
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
    return {
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


def markdown(results: dict) -> str:
    """The report: the setup, one table per workload, greedy identity, the commands."""
    lines = ["## Serving: llama-server beside spec-decode serve (`python bench/serving/serve.py`)"]
    lines += ["", _setup(results), ""]
    lines.append(
        "session s: the workload's sessions end to end (sum; prompt processing, every turn, "
        "client included). gen tok/s: tokens after the first over the time after the first "
        "streamed text. TTFT: median over turns. Passes: ours as reported in "
        "`usage.speculative`; llama-server's derived as completion tokens - accepted (a pass "
        "emits its accepted drafts plus one token; it reports drafted and accepted only)."
    )
    lines.append("")
    for workload, by_variant in results["summary"].items():
        lines += [f"**{workload}**", "", *_workload_table(by_variant), ""]
    lines += _identity_lines(results)
    lines += [
        "",
        "llama-server is built from the llama.cpp that llama-cpp-python 0.3.36 vendors "
        "(BENCHMARKS.md, 'Fast by default': the build and its flags).",
    ]
    env = " ".join(f"{k}={v}" for k, v in results.get("server_env", {}).items())
    lines += [
        "",
        f"Commands (per repetition; ports vary){f', environment {env}' if env else ''}:",
        "",
    ]
    lines += [f"- {name}: `{cmd}`" for name, cmd in results["commands"].items()]
    return "\n".join(lines) + "\n"


def _load(average: list[float] | None) -> str:
    return "not recorded" if average is None else f"{average[0]:.2f}"


def _setup(results: dict) -> str:
    """The machine, the load it ran under, the pair, the workloads and the repetitions."""
    info, sessions = results["machine"], results["sessions"]
    counts = {w: [s for s in sessions.values() if s["category"] == w] for w in WORKLOADS}
    loads = sorted(
        r["load_average"]
        for by_variant in results["runs"].values()
        for records in by_variant.values()
        for r in records
    )
    cut = ""
    if results.get("stopped_by_budget_after_s"):
        cut = (
            f" The run's time budget stopped it after "
            f"{results['stopped_by_budget_after_s'] / 60:.0f} min: {len(sessions)} of the "
            f"{results['sessions_planned']} planned sessions ran, each by every variant."
        )
    return (
        f"{info['cpu']}, {info['cores']} cores (load average "
        f"{_load(info['load_average_start'])} at start, {info['load_average_end'][0]:.2f} at "
        f"end, {loads[0]:.1f}-{loads[-1]:.1f} after the sessions, median "
        f"{statistics.median(loads):.1f}), {results['threads']} threads, one slot, context "
        f"{results['ctx']}. Target Qwen2.5-Coder-1.5B-Instruct Q4_K_M, draft 0.5B Q4_K_M, the "
        f"packaged GGUFs as shipped. Greedy, at most {results['tokens']} new tokens a turn, "
        f"streamed through the official `openai` client. Workloads: {len(counts['code-edit'])} "
        f"code-edit sessions x {counts['code-edit'][0]['turns'] if counts['code-edit'] else 0} "
        f"turns (HumanEval canonical solutions, one more edit per turn, the conversation "
        f"re-sent), {len(counts['mtbench'])} MT-bench two-turn conversations, "
        f"{len(counts['humaneval'])} HumanEval raw completions. {results['reps']} "
        "repetition(s), fresh servers each, variants of every session in a shuffled order; "
        "medians over repetitions." + cut
    )


def _workload_table(by_variant: dict[str, dict[str, object]]) -> list[str]:
    """One workload's table: a row a variant, ratios against llama-server's two anchors."""
    base = by_variant.get(BASELINE, {}).get("session_seconds")
    ngram = by_variant.get(NGRAM, {}).get("session_seconds")
    lines = [
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
    return lines


def _identity_lines(results: dict) -> list[str]:
    """Greedy identity per variant, and the chat template check."""
    lines = [
        "Greedy identity (streamed text of every turn, every repetition, against the first "
        "repetition of the variant's own target-only; no token ids through these endpoints):",
        "",
    ]
    for name, row in results["identity"].items():
        diff = f"; differing: {', '.join(row['differing'])}" if row["differing"] else ""
        lines.append(f"- {name} (vs {row['reference']}): {row['same']}/{row['total']}{diff}")
    checks = results["chat_template_same_rendering"]
    if checks:
        lines += [
            "",
            f"Chat prompts: llama-server's `/apply-template` equals our rendering of the GGUF's "
            f"template on {sum(checks.values())}/{len(checks)} first turns.",
        ]
    return lines


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
