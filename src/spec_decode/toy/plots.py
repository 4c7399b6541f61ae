"""Plots of sweep results (needs the ``plot`` extra: matplotlib)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from spec_decode.toy.experiments import RunResult


def plot_path(path: str | Path) -> Path:
    """The file :func:`plot_sweep` writes for ``path``: ``path`` itself, with ".png" added when it
    has no suffix (as matplotlib would add it); a ValueError for a directory, checked before any
    work so the message can say where the plot would have gone."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a directory; give a file name, e.g. {path / 'sweep.png'}")
    return path if path.suffix else path.with_name(path.name + ".png")


def plot_sweep(
    results: Sequence[RunResult], path: str | Path, beside: Sequence[RunResult] = ()
) -> Path:
    """Tokens per pass and speedup, one colour per k: measured dots, theory lines. Against alpha
    for one rule; with ``beside`` (the same sweep under another rule) against the draft's
    agreement, the other rule's theory dashed, since the rules differ in the alpha one draft pair
    gives. Returns the file written (see :func:`plot_path`)."""
    path = plot_path(path)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise RuntimeError('plotting needs matplotlib: pip install -e ".[plot]"') from error

    def x_of(r: RunResult) -> float:
        return r.agreement if beside else r.alpha

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    k_top = max(r.k for r in results)
    for k in sorted({r.k for r in results}):
        colour = plt.cm.viridis((k - 1) / max(1, k_top - 1))
        rows = sorted((r for r in results if r.k == k), key=x_of)
        xs = [x_of(r) for r in rows]
        for axis, measured, expected in (
            (left, [r.tokens_per_pass for r in rows], [r.expected_tokens_per_pass for r in rows]),
            (right, [r.speedup for r in rows], [r.expected_speedup for r in rows]),
        ):
            axis.plot(xs, expected, "-", color=colour, label=f"k={k} {rows[0].rule}")
            axis.plot(xs, measured, "o", color=colour, markersize=4)
        others = sorted((r for r in beside if r.k == k), key=x_of)
        for axis, expected in (
            (left, [r.expected_tokens_per_pass for r in others]),
            (right, [r.expected_speedup for r in others]),
        ):
            if others:
                label = f"k={k} {others[0].rule}"
                axis.plot([x_of(r) for r in others], expected, "--", color=colour, label=label)
    x_label = (
        "draft agreement (same draft pair under both rules)"
        if beside
        else "alpha (stationary acceptance probability)"
    )
    rules = " vs ".join(dict.fromkeys(r.rule for r in [*results, *beside]))
    left.set(
        xlabel=x_label,
        ylabel="tokens per target pass",
        title=f"Tokens per pass ({rules} rule): measured (dots) vs exact theory (lines)",
    )
    right.set(
        xlabel=x_label,
        ylabel=f"speedup (draft cost {results[0].draft_cost:g}x target)",
        title="Speedup under the cost model",
    )
    right.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    left.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
