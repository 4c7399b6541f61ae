"""The exact-rows-by-type report (``bench/kernels/exact_rows_by_type.py --render``): per weight
type and per other model, which block rows differ from one-token rows, the promise the backend
made and what checking it cost, token identity with target-only decoding, and where measured
(``bench/results/kernels_cost_by_type.json``) a 16-token block's cost against the default build."""

from __future__ import annotations

import statistics

#: The weight types the by-type benchmarks requantize the packaged target to (Q4_K_M: as shipped).
TYPES = "Q8_0,Q6_K,Q5_K_M,Q5_1,Q5_0,Q4_1,Q4_0,IQ4_XS,Q3_K_M,Q2_K,F16,BF16,Q4_K_M"


def _rows(entry: dict) -> str:
    differing = entry.get("differing_rows")
    if not differing:
        return "-"
    return " / ".join(str(len(rows)) for rows in differing.values())


def _check(entry: dict) -> str:
    """What the check adds to a first load, seen from outside / in process (after the first
    pass), in seconds."""
    outside, inside = entry.get("check_adds_seconds"), entry.get("check_seconds")
    if inside is None:
        return "-"
    return f"{inside:.1f}" if outside is None else f"{outside:.1f} / {inside:.1f}"


def _identity(entry: dict) -> tuple[str, str]:
    """'same/runs' and the median speedup of the runs, or dashes where none ran."""
    runs = [run for prompt in entry.get("identity", {}).values() for run in prompt.values()]
    if not runs:
        return "-", "-"
    same = sum(run["identical_tokens"] for run in runs)
    speedup = statistics.median(run["speedup"] for run in runs)
    return f"{same}/{len(runs)}", f"{speedup:.2f}x"


def _cost(costs: dict, name: str) -> str:
    entry = costs.get("types", {}).get(name)
    return "-" if entry is None else f"{entry['ratio_16']:.2f}x"


def markdown(results: dict, costs: dict) -> str:
    """One row per requantized type, then per other model."""
    lines = [
        "## Exact rows by weight type (`python bench/kernels/exact_rows_by_type.py`)",
        "",
        *([results["build"], ""] if "build" in results else []),
        f"Rows of blocks of {results['blocks'].replace(',', '/')} tokens that differ bitwise "
        "from the same tokens scored one at a time; the promise `build-kernels --status --model "
        "FILE` makes (the block size used) and what its check adds to loading the model the "
        "first time, in seconds (`bench/kernels/promise_cost.py`): fresh processes loading the "
        "model and scoring one token, checking against cached (the difference of their "
        "medians), / the check timed in process after the model's first pass; "
        "`generate --draft lookup --compare` on two prompts written for this benchmark, greedy "
        "and at T = 0.7 with three seeds: runs whose tokens equal target-only decoding's, and "
        "the median speedup; a 16-token block's time on the exact-rows build over "
        f"llama-server's default build ({costs.get('command', 'not measured')}).",
        "",
        "| model | weight types | differing rows | promise | check adds s | identical | speedup "
        "| 16-token block vs default |",
        "|---|---|---|---|---|---|---|---|",
    ]
    entries = [*results["types"].items(), *results.get("models", {}).items()]
    for name, entry in entries:
        types = ", ".join(sorted(entry.get("weight_types", {})))
        promise = entry.get("promise", {}).get("size", "-")
        same, speedup = _identity(entry)
        lines.append(
            f"| {name} | {types} | {_rows(entry)} | {promise} | {_check(entry)} | {same} | "
            f"{speedup} | {_cost(costs, name)} |"
        )
    return "\n".join(lines) + "\n"
