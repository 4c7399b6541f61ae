"""The columns every engine-audit table shares: one report's verdict and its evidence, in
Markdown (the toy engines' table and the real engines' add their own columns around them)."""

from __future__ import annotations

from typing import Any

#: The shared columns' header cells.
HEADER = (
    "samples | verdict | p | detectable TV | TV estimate (95 %) | plug-in TV | "
    "exact engine's 95th pct"
)


def verdict_cells(report: dict[str, Any]) -> str:
    """The shared cells of one audit report (an ``EngineAuditReport`` as a dict)."""
    low, high = report["tv_interval"]
    return (
        f"{report['samples']:,} | {report['verdict']} | {report['p_value']:.2g} | "
        f"{report['detectable_tv']:.4f} | {report['tv']:.4f} ({low:.4f}-{high:.4f}) | "
        f"{report['plug_in_tv']:.4f} | {report['exact_tv_95']:.4f}"
    )
