"""What the repetitions of :func:`bench.lib.repetitions.interleaved` come to: medians per
variant, and whether greedy output was the reference's token for token; and a distribution's
low quantiles (per-prompt speedups are reported by their min, p10 and median)."""

from __future__ import annotations

import statistics

import numpy as np

from bench.lib.records import RunRecord


def quantiles(values: list[float]) -> dict[str, float]:
    """The min, the 10th percentile and the median of ``values``."""
    return {
        "min": min(values),
        "p10": float(np.percentile(values, 10)),
        "median": statistics.median(values),
    }


def summarize(runs: list[RunRecord]) -> dict[str, object]:
    """Medians over repetitions: tokens/s (all rates kept) and each counted figure present."""
    rates = [r["generated"] / r["seconds"] for r in runs]
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
