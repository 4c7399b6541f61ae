"""Options and output helpers shared by the ``spec-decode`` commands."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from spec_decode.backends.cores import available_cores
from spec_decode.core.checks import MAX_TOKENS
from spec_decode.core.randomness import fold_seed
from spec_decode.core.sampling import SAMPLING_RANGES, SamplingParams
from spec_decode.core.tree import TreeShape

console = Console()
#: Progress and status go to standard error, so standard output stays the result alone.
err_console = Console(stderr=True)

Seed = Annotated[
    int,
    typer.Option(
        callback=fold_seed,
        help="Seed of every random choice: same seed, same output (any integer, mod 2**128).",
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text.")]
K = Annotated[int, typer.Option("--k", min=1, help="Tokens drafted per step (k >= 1).")]
Tokens = Annotated[
    int, typer.Option(min=1, max=MAX_TOKENS, help=f"Tokens to generate (at most {MAX_TOKENS:,}).")
]
Vocab = Annotated[int, typer.Option(min=2, help="Vocabulary size of the toy models.")]
DraftCost = Annotated[
    float, typer.Option(min=0.0, help="Cost of one draft call, in target passes (cost model).")
]


def _sampling_option(name: str, help: str) -> typer.models.OptionInfo:
    """A sampling control's option, bounded by its :data:`SAMPLING_RANGES` entry (an open
    lower bound is left to :class:`SamplingParams`, through :func:`sampling_params`)."""
    bounds = SAMPLING_RANGES[name]
    high = None if math.isinf(bounds.high) else bounds.high
    return typer.Option(min=bounds.low, max=high, help=help)


Temperature = Annotated[float, _sampling_option("temperature", "0 means greedy.")]
TopK = Annotated[int | None, _sampling_option("top_k", "Keep the k most likely tokens.")]
TopP = Annotated[float, _sampling_option("top_p", "Keep the smallest set with this much mass.")]
MinP = Annotated[float, _sampling_option("min_p", "Drop tokens below this times the top one's.")]
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
def progress(description: str, total: int, enabled: bool) -> Iterator[Callable[..., None]]:
    """A Rich progress bar on standard error (silent when ``enabled`` is False); yields the
    advance callback, which takes how many steps were done (default 1)."""
    with Progress(console=err_console, transient=True, disable=not enabled) as progress:
        task = progress.add_task(description, total=total)
        yield lambda steps=1: progress.advance(task, steps)


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
#: theory recurses once per sibling. A sweep generates its tokens once per (agreement, k), and
#: all of them together are held to the library's limit on one generation.
MAX_K = 1024
MAX_TABLE_ENTRIES = 2**24
MAX_TREE_NODES = 1024
MAX_TREE_WIDTH = 32

#: ``--k`` of the real-model commands: the most tokens a step drafts; None follows the build.
EngineK = Annotated[
    int | None,
    typer.Option(
        "--k",
        min=1,
        max=MAX_K,
        help="The most tokens drafted a step (default: 4; more under auto with the exact-rows "
        "kernels).",
    ),
]


def check_sizes(
    k: int, vocab: int, order: int, tree: str | None = None, k_max: int | None = None
) -> TreeShape | None:
    """Refuse sizes beyond the limits above as bad parameters (exit 2), naming the limit; the
    tree shape parsed from ``tree``, if given."""
    for value, option in ((k, "--k"), (k_max, "--k-max")):
        if value is not None and value > MAX_K:
            raise typer.BadParameter(
                f"k = {value} is above the limit of {MAX_K}", param_hint=option
            )
    if (order + 1) * math.log2(vocab) > math.log2(MAX_TABLE_ENTRIES):  # without the power
        raise typer.BadParameter(
            f"vocab ** (order + 1) = {vocab} ** {order + 1} table entries is above the limit "
            f"of {MAX_TABLE_ENTRIES:,} (e.g. vocab <= 4096 at order 1)",
            param_hint="--vocab",
        )
    return None if tree is None else tree_shape(tree)


def tree_shape(text: str, max_leaves: int | None = None) -> TreeShape:
    """``--tree`` parsed and checked by :func:`check_tree_shape` (exit 2 when malformed)."""
    try:
        shape = TreeShape.parse(text)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--tree") from error
    return check_tree_shape(shape, max_leaves)


def check_tree_shape(shape: TreeShape, max_leaves: int | None = None) -> TreeShape:
    """Refuse a tree shape above :data:`MAX_TREE_NODES` nodes, :data:`MAX_TREE_WIDTH` children
    per node or, when given, ``max_leaves`` leaves (a backend's limit on the paths it verifies in
    one pass, such as llama.cpp's ``max_tree_leaves``), as a bad parameter: before any model is
    loaded, instead of an out-of-memory kill or an error mid-generation."""
    leaves = math.prod(shape.widths)
    width = max(shape.widths)
    if shape.nodes > MAX_TREE_NODES or width > MAX_TREE_WIDTH:
        raise typer.BadParameter(
            f"tree {shape} has {shape.nodes:,} nodes and width {width}; the limits are "
            f"{MAX_TREE_NODES} nodes and width {MAX_TREE_WIDTH}",
            param_hint="--tree",
        )
    if max_leaves is not None and leaves > max_leaves:
        raise typer.BadParameter(
            f"tree {shape} has {leaves:,} leaves; this backend verifies at most {max_leaves} "
            "paths in one pass",
            param_hint="--tree",
        )
    return shape


def check_sweep(k: int, vocab: int, tokens: int, runs_per_k: int) -> None:
    """A sweep's sizes: those of :func:`check_sizes`, and every run's tokens together
    (``runs_per_k`` agreements x k values x ``tokens``) within :data:`MAX_TOKENS`."""
    check_sizes(k, vocab, 1)
    total = runs_per_k * k * tokens
    if total > MAX_TOKENS:
        raise typer.BadParameter(
            f"a sweep generates {runs_per_k} agreements x k = {k} x {tokens:,} tokens = "
            f"{total:,} tokens, above the limit of {MAX_TOKENS:,}; lower --k or --tokens",
            param_hint="--tokens",
        )


def check_threads(threads: int | None) -> int | None:
    """``--threads`` when it is at most :func:`available_cores`; more threads than cores only
    contend (a thousand of them made a 2-core machine unusable), so it is a bad parameter."""
    if threads is not None and threads > available_cores():
        raise typer.BadParameter(
            f"{threads} threads is more than the {available_cores()} cores this process may use "
            f"(os.sched_getaffinity); give at most {available_cores()}",
            param_hint="--threads",
        )
    return threads


Threads = Annotated[
    int | None,
    typer.Option(
        min=1,
        callback=check_threads,
        help="Threads (default and most: every core this process may use).",
    ),
]

#: The most bytes a prompt may have: far beyond any model's context window, and read before
#: the tokenizer sees it, so a wrong file piped in fails at once instead of filling memory.
MAX_PROMPT_BYTES = 16 * 2**20


def prompt_text(prompt: str | None) -> str:
    """The prompt: ``prompt`` itself, or standard input read as bytes; either way decoded as
    UTF-8, with bytes that are not UTF-8 a bad parameter (exit 2) naming the first one and its
    offset, instead of an encoding error from deep inside the tokenizer."""
    if prompt is None:
        source, data = "standard input", sys.stdin.buffer.read(MAX_PROMPT_BYTES + 1)
    else:
        source = "--prompt"
        try:  # arguments that are not UTF-8 reach Python as lone surrogates
            data = prompt.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as error:
            raise typer.BadParameter(
                f"--prompt holds a lone surrogate at offset {error.start}: not text",
                param_hint="--prompt",
            ) from error
    if len(data) > MAX_PROMPT_BYTES:
        raise typer.BadParameter(
            f"{source} is longer than the limit of {MAX_PROMPT_BYTES:,} bytes",
            param_hint="--prompt",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise typer.BadParameter(
            f"{source} is not UTF-8: byte 0x{data[error.start]:02x} at offset {error.start}; "
            "convert it first (e.g. iconv -f LATIN1 -t UTF-8)",
            param_hint="--prompt",
        ) from error


def print_load_notes(engine: Any) -> None:
    """Say once, on standard error, what loading decided that changes what the user asked
    for: a draft set aside (its vocabulary is not the target's), or a llama.cpp target whose
    exact blocks are shorter than its build's (a weight type the exact-rows kernels do not
    cover), each with why."""
    for note in getattr(engine, "notes", ()):
        err_console.print(f"[yellow]note:[/] {note}")
    rows = getattr(engine.target.model, "exact_rows", None)
    if rows is not None and rows.reduced:
        err_console.print(f"[yellow]note:[/] {rows.why}")
