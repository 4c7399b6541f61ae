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


def plot_sweep(results: Sequence[RunResult], path: str | Path) -> Path:
    """Tokens per pass and speedup against alpha, one colour per k: measured dots, theory lines.
    Returns the file written (see :func:`plot_path`)."""
    path = plot_path(path)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise RuntimeError('plotting needs matplotlib: pip install -e ".[plot]"') from error

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for k in sorted({r.k for r in results}):
        rows = sorted((r for r in results if r.k == k), key=lambda r: r.alpha)
        alphas = [r.alpha for r in rows]
        colour = plt.cm.viridis((k - 1) / max(1, max(r.k for r in results) - 1))
        for axis, measured, expected in (
            (left, [r.tokens_per_pass for r in rows], [r.expected_tokens_per_pass for r in rows]),
            (right, [r.speedup for r in rows], [r.expected_speedup for r in rows]),
        ):
            axis.plot(alphas, expected, "-", color=colour, label=f"k={k}")
            axis.plot(alphas, measured, "o", color=colour, markersize=4)
    draft_cost = results[0].draft_cost
    left.set(
        xlabel="alpha (stationary acceptance probability)",
        ylabel="tokens per target pass",
        title="Tokens per pass: measured (dots) vs exact theory (lines)",
    )
    right.set(
        xlabel="alpha (stationary acceptance probability)",
        ylabel=f"speedup (draft cost {draft_cost:g}x target)",
        title="Speedup under the cost model",
    )
    right.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    left.legend(fontsize=8, ncol=2)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
