"""``spec-decode build-kernels``: build llama.cpp's exact-rows kernels once per machine.

Builds the patched llama.cpp shared libraries (see :mod:`spec_decode.backends.llamacpp.build`)
from llama-cpp-python's pinned sdist into the user cache, where spec-decode loads them from then
on (:mod:`spec_decode.backends.llamacpp.library`), and prints the ``LLAMA_CPP_LIB_PATH`` that
makes other programs load them. With them loaded, the llama.cpp backend scores drafted blocks of
up to 64 tokens in one call, every row bitwise the one-token row; without them it keeps the stock
3-token exact blocks.
``--status`` only says which build this process would load and what it guarantees; with
``--model`` also the exact block size for that model's weight types, checked on its weights.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from spec_decode.cli.options import print_json

console = Console(stderr=True)


def build_kernels_command(
    sdist: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            dir_okay=False,
            help="llama-cpp-python 0.3.36 sdist (default: pip downloads it; sha256 checked).",
        ),
    ] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Compiler jobs.")] = 2,
    work_dir: Annotated[
        Path | None, typer.Option(help="Keep the source and build tree here (default: a temp dir).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even if it exists.")] = False,
    status: Annotated[
        bool, typer.Option("--status", help="Only report the build loaded and the cached one.")
    ] = False,
    model: Annotated[
        str | None,
        typer.Option(help="With --status: a GGUF file or packaged name to check the blocks of."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Build llama.cpp kernels whose block rows are bitwise equal to one-token rows."""
    from spec_decode.backends.llamacpp import build, library

    folder = build.lib_dir()
    info = build.read_build_info(folder)
    if status:
        print_status(folder, info, as_json, model)
        return
    if info is None or force:
        try:
            folder = build.build(
                sdist=sdist,
                jobs=jobs,
                work_dir=work_dir,
                keep_work=work_dir is not None,
                log=console.print,
            )
        except ValueError as error:  # the sdist given is not the pinned one: the user's input
            console.print(f"[red]error:[/] {error}")
            raise typer.Exit(2) from error
        except Exception as error:  # a failed download, compiler or pip run
            if library.own_library_folder() is None:
                console.print(f"[red]error:[/] building llama.cpp failed: {error}")
                raise typer.Exit(1) from error
            console.print(
                f"[yellow]warning:[/] building llama.cpp failed ({error}); spec-decode keeps "
                "llama-cpp-python's own libraries (exact blocks of a few tokens only)"
            )
            return
        info = build.read_build_info(folder)
    else:
        console.print(f"already built: {folder} (--force rebuilds)")
    if as_json:
        print_json({"lib_dir": str(folder), "build_info": info})
        return
    console.print(
        "spec-decode loads this build from now on (SPEC_DECODE_KERNELS=stock: llama-cpp-python's "
        "own libraries); other programs load it with:"
    )
    print(f"export LLAMA_CPP_LIB_PATH={folder}")


def print_status(folder: Path, info: dict | None, as_json: bool, model: str | None) -> None:
    """Which libraries this process loads, what they guarantee (for ``model`` too, when
    named), and the cached build."""
    from spec_decode.backends.llamacpp.library import LibrariesMissing

    rows = None
    try:
        from spec_decode.backends.llamacpp.kernels import exact_block_size, kernels_status

        loaded, exact = kernels_status(), exact_block_size()
        rows = None if model is None else model_exact_rows(model)
    except LibrariesMissing as error:
        loaded, exact = str(error), None
    except (ValueError, FileNotFoundError) as error:
        console.print(f"[red]error:[/] {error}")
        raise typer.Exit(2) from error
    payload = {
        "loaded": loaded,
        "exact_block_size": exact,
        "model": model,
        "model_exact_rows": rows,
        "LLAMA_CPP_LIB_PATH": os.environ.get("LLAMA_CPP_LIB_PATH"),
        "cached_build": str(folder) if info else None,
        "cached_build_info": info,
    }
    if as_json:
        print_json(payload)
        return
    console.print(loaded)
    if rows is not None:
        console.print(f"{model}: {rows['why']}")
    console.print(f"cached build for this CPU: {folder if info else 'none'}")


def model_exact_rows(model: str) -> dict[str, object]:
    """The exact block size of ``model`` (a GGUF path or packaged name) on the loaded build and
    why: its weight types against the covered ones, checked on its weights (cached)."""
    from spec_decode.backends.llamacpp.model import LlamaCppModel
    from spec_decode.backends.loading import resolve_gguf

    loaded = LlamaCppModel(resolve_gguf(model), n_ctx=256)
    try:
        return loaded.exact_rows.report()
    finally:
        loaded.close()
