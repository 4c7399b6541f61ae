"""``spec-decode calibrate``: measure (or show the cached) cost curve of a target and draft.

Prints the target's pass time for block lengths 1..17 in ms and in units of a one-token pass, and
the draft's cost per token; ``--plot FILE`` also draws the curve (matplotlib is imported only
then). The measurement is what ``generate --policy auto`` uses; see
:mod:`spec_decode.backends.calibration`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from spec_decode.backends.calibration import cost_curve
from spec_decode.backends.loading import load
from spec_decode.backends.registry import DEFAULT_DRAFT, DEFAULT_TARGET
from spec_decode.cli import preflight
from spec_decode.cli.engine_options import NoBuild
from spec_decode.cli.options import print_json
from spec_decode.drafting.costs import CostCurve
from spec_decode.serving.config import LOOKUP, NO_DRAFT, EngineConfig

console = Console(stderr=True)


def calibrate_command(
    target: Annotated[
        str, typer.Option(help="Packaged model name, a GGUF file or a transformers folder.")
    ] = DEFAULT_TARGET,
    draft: Annotated[
        str, typer.Option(help="The draft model likewise, or 'none' to time the target alone.")
    ] = DEFAULT_DRAFT,
    backend: Annotated[
        str, typer.Option(help="auto, llama.cpp or transformers (as for generate).")
    ] = "auto",
    threads: Annotated[
        int | None, typer.Option(min=1, help="llama.cpp threads (default: every core).")
    ] = None,
    plot: Annotated[Path | None, typer.Option(help="Also draw the curve into this file.")] = None,
    recalibrate: Annotated[
        bool, typer.Option("--recalibrate", help="Measure again even when a cached curve exists.")
    ] = False,
    no_build: NoBuild = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Measure this machine's cost of a target pass by block length, and of a draft token."""
    try:
        plot = None if plot is None else _plot_file(plot)
        if draft == LOOKUP:
            raise preflight.Refused("--draft lookup costs nothing to time: give a model or none")
        config = EngineConfig(
            target=target, draft=NO_DRAFT if draft == "none" else draft, backend=backend
        )
        chosen = preflight.ready(config, no_build)
        target_model = load(chosen, target, threads=threads).model
        draft_model = None if draft == "none" else load(chosen, draft, threads=threads).model
        curve = cost_curve(chosen, target_model, draft_model, recalibrate=recalibrate)
    except (ValueError, FileNotFoundError) as error:
        preflight.fail(error)
    payload = {
        "backend": chosen,
        "target": target,
        "draft": None if draft == "none" else draft,
        "threads": getattr(target_model, "n_threads", None),
        "block_sizes": list(curve.sizes),
        "target_ms": [1000 * s for s in curve.seconds],
        "relative": [curve.relative(n) for n in curve.sizes],
        "draft_ms_per_token": None if curve.draft_seconds is None else 1000 * curve.draft_seconds,
    }
    if plot is not None:
        _plot(curve, plot, f"{chosen}: {Path(target).name}")
        payload["plot"] = str(plot)
    if as_json:
        print_json(payload)
        return
    table = Table(title=f"{chosen} target pass cost by tokens scored")
    for column in ("tokens", "ms", "x one token"):
        table.add_column(column, justify="right")
    for n, seconds in zip(curve.sizes, curve.seconds, strict=True):
        table.add_row(str(n), f"{1000 * seconds:.1f}", f"{curve.relative(n):.2f}")
    Console().print(table)
    if curve.draft_seconds is not None:
        ratio = curve.draft_seconds / curve.target(1)
        Console().print(f"draft: {1000 * curve.draft_seconds:.1f} ms a token ({ratio:.2f}x)")


def _plot_file(plot: Path) -> Path:
    """The file ``--plot`` names (".png" added when it has no suffix), checked writable and
    matplotlib installed, before anything is measured."""
    from spec_decode.toy.plots import plot_path

    path = plot if plot.is_dir() else plot_path(plot)
    preflight.check_output(path, "--plot")
    preflight.require("plot", ("matplotlib",), "--plot")
    return path


def _plot(curve: CostCurve, file: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4))
    axes.plot(curve.sizes, [1000 * s for s in curve.seconds], "o-", label="target pass")
    if curve.draft_seconds is not None:
        drafted = [1000 * (curve.target(n) + (n - 1) * curve.draft_seconds) for n in curve.sizes]
        axes.plot(curve.sizes, drafted, "s--", label="pass + n-1 draft tokens")
    axes.set(xlabel="tokens scored in one pass", ylabel="ms", title=title)
    axes.legend()
    figure.tight_layout()
    figure.savefig(file)
    plt.close(figure)
