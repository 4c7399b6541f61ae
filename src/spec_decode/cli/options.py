"""Options and output helpers shared by the ``spec-decode`` commands."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from spec_decode.core.randomness import fold_seed
from spec_decode.core.sampling import SamplingParams

console = Console()
#: Progress and status go to standard error, so standard output stays the result alone.
err_console = Console(stderr=True)

Seed = Annotated[
    int,
    typer.Option(
        callback=fold_seed,
        help="Seed of every random choice; same seed, same output. Any integer: negative ones "
        "and those beyond 128 bits are taken modulo 2**128.",
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text.")]
K = Annotated[int, typer.Option("--k", min=1, help="Tokens drafted per step (k >= 1).")]
Tokens = Annotated[int, typer.Option(min=1, help="Tokens to generate.")]
Vocab = Annotated[int, typer.Option(min=2, help="Vocabulary size of the toy models.")]
DraftCost = Annotated[
    float, typer.Option(min=0.0, help="Cost of one draft call, in target passes (cost model).")
]
Temperature = Annotated[float, typer.Option(min=0.0, help="0 means greedy.")]
TopK = Annotated[int | None, typer.Option(min=1, help="Keep the k most likely tokens.")]
TopP = Annotated[
    float, typer.Option(min=0.0, max=1.0, help="Keep the smallest set with this much mass.")
]
MinP = Annotated[
    float, typer.Option(min=0.0, max=1.0, help="Drop tokens below this times the top one's.")
]
TreeWidths = Annotated[
    str | None,
    typer.Option(
        help="Draft a token tree instead of a chain: children per node, depth by depth, "
        "e.g. 3,2,1 (replaces --k).",
    ),
]
Confidence = Annotated[
    float,
    typer.Option(
        min=0.0, max=1.0, help="Stop drafting where the draft's top probability is below this."
    ),
]


def sampling_params(
    temperature: float, top_k: int | None, top_p: float, min_p: float
) -> SamplingParams:
    """The sampling controls, with a bad combination reported as a bad parameter (exit 2)."""
    try:
        return SamplingParams(temperature, top_k, top_p, min_p)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error


def print_json(payload: dict) -> None:
    """JSON with NaN and infinities written as null, so any parser accepts it."""

    def clean(value: object) -> object:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {key: clean(item) for key, item in value.items()}
        if isinstance(value, list):
            return [clean(item) for item in value]
        return value

    typer.echo(json.dumps(clean(payload), indent=2))


@contextmanager
def progress(description: str, total: int, enabled: bool) -> Iterator[Callable[[], None]]:
    """A Rich progress bar on standard error (silent when ``enabled`` is False); yields the
    advance callback."""
    with Progress(console=err_console, transient=True, disable=not enabled) as progress:
        task = progress.add_task(description, total=total)
        yield lambda: progress.advance(task)


@contextmanager
def status(description: str, enabled: bool) -> Iterator[Callable[[str], None]]:
    """A one-line status with a spinner and the time elapsed, on standard error (silent when
    ``enabled`` is False); yields the callback that replaces its text."""
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=True, disable=not enabled) as bar:
        task = bar.add_task(description, total=None)
        yield lambda text: bar.update(task, description=text)


#: Largest sizes the toy commands accept. They are checked before any work starts, so a typo
#: fails in a second with the limit named instead of hanging or raising MemoryError: the theory
#: walks k deep per iteration, each toy model holds vocab ** (order + 1) floats, and the tree
#: theory recurses once per sibling.
MAX_K = 1024
MAX_TABLE_ENTRIES = 2**24
MAX_TREE_NODES = 1024
MAX_TREE_WIDTH = 32


def check_sizes(k: int, vocab: int, order: int, tree: str | None = None) -> None:
    """Refuse sizes beyond the limits above as bad parameters (exit 2), naming the limit."""
    if k > MAX_K:
        raise typer.BadParameter(f"k = {k} is above the limit of {MAX_K}", param_hint="--k")
    if vocab ** (order + 1) > MAX_TABLE_ENTRIES:
        raise typer.BadParameter(
            f"vocab ** (order + 1) = {vocab ** (order + 1):.3g} table entries is above the limit "
            f"of {MAX_TABLE_ENTRIES:,} (e.g. vocab <= 4096 at order 1)",
            param_hint="--vocab",
        )
    if tree is not None:
        widths = [int(w) for w in tree.split(",") if w.strip().isdigit()]
        nodes = sum(math.prod(widths[: d + 1]) for d in range(len(widths)))
        if nodes > MAX_TREE_NODES or max(widths, default=0) > MAX_TREE_WIDTH:
            raise typer.BadParameter(
                f"tree {tree} has {nodes:,} nodes and width {max(widths)}; the limits are "
                f"{MAX_TREE_NODES} nodes and width {MAX_TREE_WIDTH}",
                param_hint="--tree",
            )
