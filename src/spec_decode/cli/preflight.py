"""What ``generate``, ``serve`` and ``calibrate`` check before anything slow or large happens.

A wrong model name, a missing extra, an unwritable cache or plot file, a port in use: each is
found here in milliseconds, before a 1.1 GB model is assembled or converted, a model is loaded
or the machine is measured, and refused with :class:`Refused` (a ``ValueError``, which the
commands print as one sentence and exit 2). Missing llama.cpp kernels are built here, once, with
a progress line (about 3 minutes on 2 cores), unless ``--no-build`` (or ``SPEC_DECODE_NO_BUILD=1``)
asks for a refusal instead.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn, TextIO

import typer
from rich.console import Console
from rich.markup import escape

from spec_decode.backends.registry import PREPARED
from spec_decode.serving.config import LOOKUP, NO_DRAFT, EngineConfig

#: The environment variable that stands for ``--no-build``.
NO_BUILD_ENV = "SPEC_DECODE_NO_BUILD"
#: What each backend imports, and the extra that installs it.
BACKEND_EXTRAS = {
    "llama.cpp": ("llama", ("llama_cpp",)),
    "transformers": ("hf", ("torch", "transformers")),
}

#: The extra that installs each package the extras bring, for an import that failed anyway.
EXTRA_OF_MODULE = {
    "llama_cpp": "llama",
    **dict.fromkeys(("torch", "transformers", "accelerate", "safetensors", "gguf"), "hf"),
    **dict.fromkeys(("fastapi", "uvicorn", "sse_starlette", "prometheus_client"), "serve"),
    **dict.fromkeys(("pydantic", "openai", "httpx", "llguidance"), "serve"),
    **dict.fromkeys(("agents", "instructor"), "agents"),
    "matplotlib": "plot",
}


class Refused(ValueError):
    """A check failed: the message is what the user reads (one or two sentences)."""


def fail(error: BaseException | str) -> NoReturn:
    """Print ``error`` as the one line it is (brackets such as ``[llama]`` kept, not read as
    markup) on standard error and exit 2."""
    Console(stderr=True).print(f"[red]error:[/] {escape(str(error))}")
    raise typer.Exit(2)


def install_hint(extra: str) -> str:
    """The install line of an extra, as the README gives it."""
    line = f'pip install -e ".[{extra}]"'
    return f'CMAKE_ARGS="-DLLAMA_BUILD=OFF" {line}' if extra == "llama" else line


def require(extra: str, modules: tuple[str, ...], needed_for: str) -> None:
    """Refuse unless every module in ``modules`` is installed, naming the extra that installs it."""
    missing = [name for name in modules if not _installed(name)]
    if missing:
        raise Refused(
            f"{needed_for} needs the [{extra}] extra ({', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not installed); "
            f"install it with: {install_hint(extra)}"
        )


def ready(config: EngineConfig, no_build: bool) -> str:
    """:func:`check_engine`, then on llama.cpp :func:`ensure_kernels`: the backend, ready."""
    backend = check_engine(config)
    if backend == "llama.cpp":
        ensure_kernels(no_build)
    return backend


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def check_engine(config: EngineConfig) -> str:
    """The backend ``config`` loads on, once its models, the backend's extra and the cache are
    checked (nothing loaded, converted or copied): a mistyped path first, the cache, the extra,
    then what each model is."""
    backend = config.checked_backend()
    if backend == "llama.cpp" and config.device != "cpu":
        raise Refused("the llama.cpp backend runs on the CPU; --backend transformers runs on cuda")
    models = {"--target": config.target}
    if config.draft not in (LOOKUP, NO_DRAFT):
        models["--draft"] = config.draft
    for option, name in models.items():
        if name not in PREPARED and not Path(name).expanduser().exists():
            raise Refused(
                f"{option} {name}: no such file or folder, nor a packaged model (the packaged "
                f"models are {', '.join(PREPARED)})"
            )
    check_cache()
    extra, modules = BACKEND_EXTRAS[backend]
    if config.backend == "auto" and config.target in PREPARED and not _installed("torch"):
        extra, modules = BACKEND_EXTRAS["llama.cpp"]  # neither backend: the packaged pair's
    require(extra, modules, f"running {config.target}")
    if backend == "transformers" and PREPARED.keys() & set(models.values()):
        require("hf", ("gguf",), "converting a packaged model for transformers")
    for option, name in models.items():
        check_model(backend, name, option)
    return backend


def check_model(backend: str, name: str, option: str) -> None:
    """Refuse ``name`` unless it is a packaged model whose wheels are installed (or whose file is
    already assembled), a GGUF file (llama.cpp) or a transformers folder (transformers)."""
    if name in PREPARED:
        from spec_decode.backends import assembly, converted
        from spec_decode.backends.registry import part_files, spec_of

        if backend == "llama.cpp":
            ready = assembly.is_verified(name)
        else:
            ready = converted.is_prepared(name)
        if not ready:
            try:
                part_files(spec_of(name))
            except FileNotFoundError as error:  # the [qwen] wheels are not installed
                raise Refused(f'{error} (or pip install -e ".[qwen]")') from error
        return
    path = Path(name).expanduser()
    gguf = path.is_file() and _magic(path) == b"GGUF"
    if backend == "llama.cpp" and not gguf:
        raise Refused(f"{option} {name}: not a GGUF file, which the llama.cpp backend reads")
    if backend == "transformers" and not (path / "config.json").is_file():
        what = "a GGUF file (use --backend llama.cpp)" if gguf else "not a model"
        raise Refused(
            f"{option} {name}: {what}; the transformers backend reads a folder with config.json"
        )


def _magic(path: Path) -> bytes:
    try:
        with path.open("rb") as file:
            return file.read(4)
    except OSError:
        return b""


def check_cache() -> None:
    """Refuse a user cache (``SPEC_DECODE_CACHE``) where files cannot be written."""
    from spec_decode.backends.cache import CACHE_ENV, cache_root

    root = cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".write-check-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as error:
        raise Refused(
            f"the cache folder {root} is not writable ({error.strerror}); set {CACHE_ENV} to a "
            "folder that is"
        ) from error


def check_output(path: Path, option: str = "") -> None:
    """Refuse an output file that cannot be written (a missing folder, no permission, a folder
    given for a file), before the work whose result it would hold; ``option`` names it."""
    named = f"{option} {path}".strip()
    if path.is_dir():
        raise Refused(f"{named}: a folder; give a file name, e.g. {path / 'plot.png'}")
    existed = path.exists()
    try:
        with path.open("ab"):
            pass
    except OSError as error:
        raise Refused(f"{named}: cannot write there ({error.strerror})") from error
    if not existed:
        path.unlink(missing_ok=True)


def bind(host: str, port: int) -> socket.socket:
    """The listening address bound now, as uvicorn would bind it, so a port in use or a wrong
    host is refused before the model loads (uvicorn then serves on this socket)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise Refused(
                f"port {port} on {host} is already in use; stop what holds it, or give another "
                "--port (0: any free one)"
            ) from error
        raise Refused(f"cannot listen on {host}:{port} ({error.strerror or error})") from error
    sock.set_inheritable(True)
    return sock


def ensure_kernels(no_build: bool) -> None:
    """Make sure llama.cpp libraries this CPU can run are there: build the exact-rows kernels
    now when none are (unless ``no_build``, or the user chose the libraries by environment
    variable: then refuse with what to run)."""
    from spec_decode.backends.llamacpp import build, isa, library

    def missing() -> str | None:
        try:
            library.choose(os.environ, isa.cpu_flags(), library.own_library_folder())
        except library.LibrariesMissing as error:
            return str(error)
        return None

    why = missing()
    if why is None:
        return
    if os.environ.get(library.LIB_PATH_ENV) or os.environ.get(library.CHOICE_ENV):
        raise Refused(why)
    if no_build:
        raise Refused(
            f"{why} (about 3 minutes), or run this again without --no-build / {NO_BUILD_ENV}, "
            "which builds them first"
        )
    from spec_decode.backends.cache import file_lock

    folder = build.kernels_dir()
    with file_lock(folder.with_name(folder.name + ".lock")):
        if missing() is not None:  # another process may have built them meanwhile
            _build(folder.with_name(folder.name + ".log"))
    why = missing()
    if why is not None:
        raise Refused(why)


def _build(log_file: Path) -> None:
    """Build the kernels with a progress line on standard error; the compiler's own output goes
    to ``log_file``, named when the build fails."""
    from spec_decode.backends.cores import available_cores
    from spec_decode.backends.llamacpp import build

    start = time.perf_counter()
    with _output_to(log_file) as terminal:
        shown = Console(file=terminal, highlight=False)
        shown.print(
            "llama.cpp's kernels are not built for this CPU yet: building them once, about 3 "
            f"minutes on 2 cores (--no-build refuses instead; compiler output: {log_file})"
        )
        try:
            with shown.status("building llama.cpp kernels"):
                build.build(jobs=available_cores(), log=lambda line: shown.print(escape(line)))
        except Exception as error:
            raise Refused(
                f"building llama.cpp's kernels failed ({error}); the compiler's output is in "
                f"{log_file}, and spec-decode build-kernels retries"
            ) from error
        shown.print(f"kernels ready after {time.perf_counter() - start:.0f} s")


@contextlib.contextmanager
def _output_to(log_file: Path) -> Iterator[TextIO]:
    """Send this process's file descriptors 1 and 2 (and so any child's output) to ``log_file``
    while the block runs; yields a text stream on the standard error from before."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    terminal = os.fdopen(os.dup(saved[1]), "w", buffering=1)
    try:
        with log_file.open("ab") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            try:
                yield terminal
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        terminal.close()
        for fd in saved:
            os.close(fd)
