"""Which llama.cpp libraries llama-cpp-python loads, chosen once by :func:`load`.

llama-cpp-python loads its shared libraries once, when ``llama_cpp`` is first imported, from the
folder ``LLAMA_CPP_LIB_PATH`` names or else from its own folder (empty when it was installed with
``CMAKE_ARGS="-DLLAMA_BUILD=OFF"``, as the README does: llama.cpp is then compiled once, by
``spec-decode build-kernels``). :func:`load` makes that choice explicitly, when a model is loaded,
and imports the bindings; it is idempotent. In order:

1. ``LLAMA_CPP_LIB_PATH`` set by the user: that folder;
2. ``SPEC_DECODE_KERNELS=stock``: llama-cpp-python's own libraries;
3. the build ``spec-decode build-kernels`` made for this CPU (its folder is keyed by the
   instruction sets it was compiled for, :func:`~spec_decode.backends.llamacpp.build.build_key`);
4. llama-cpp-python's own libraries, with one warning (stock kernels: short exact blocks).

A folder whose ``build-info.json`` records CPU flags this CPU lacks is never loaded (a cache
shared with a richer CPU would otherwise die with SIGILL): :func:`choose` refuses it with a
message and falls back. Where nothing loadable remains, :class:`LibrariesMissing` says what to run.

The choice reaches llama-cpp-python the only way it takes one: ``LLAMA_CPP_LIB_PATH`` in this
process's environment, which child processes (a server, a CLI run by a test) inherit.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from spec_decode.backends.llamacpp import build, isa

#: Environment variable choosing the libraries: ``stock`` for llama-cpp-python's own.
CHOICE_ENV = "SPEC_DECODE_KERNELS"
LIB_PATH_ENV = "LLAMA_CPP_LIB_PATH"
_FIX = "run `spec-decode build-kernels`"


class LibrariesMissing(RuntimeError):
    """No llama.cpp libraries this CPU can run: llama-cpp-python was installed without its own
    and no usable spec-decode build exists."""


@dataclass(frozen=True)
class Libraries:
    """The llama.cpp libraries chosen: ``folder`` (None: llama-cpp-python's own), where the
    choice came from, and the warning it deserves (None when all is as intended)."""

    folder: Path | None
    origin: str
    warning: str | None = None


def own_library_folder() -> Path | None:
    """llama-cpp-python's own library folder when it holds ``libllama`` (found without importing
    the bindings, which would load them), else None."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "lib"
    return folder if any(folder.glob("libllama.*")) else None


def runnable(folder: Path, info: dict | None, flags: frozenset[str]) -> str | None:
    """Why this CPU (``flags``) cannot run the build in ``folder`` whose ``build-info.json`` is
    ``info``, or None when it can (or there is no build info: not a spec-decode build)."""
    if info is None:
        return None
    missing = sorted(set(info.get("cpu_flags", ())) - flags)
    if missing:
        return f"{folder} was compiled for CPU features this CPU lacks ({', '.join(missing)})"
    return None


def choose(environ: Mapping[str, str], flags: frozenset[str], own: Path | None) -> Libraries:
    """The libraries to load, from the environment, this CPU's ``flags`` and llama-cpp-python's
    own folder (``own``; None when it has none). Pure: :func:`load` applies the result."""
    user = environ.get(LIB_PATH_ENV)
    if user:
        refused = runnable(Path(user), build.read_build_info(Path(user)), flags)
        if refused is None:
            return Libraries(Path(user), LIB_PATH_ENV)
        if own is None:
            raise LibrariesMissing(f"{LIB_PATH_ENV}: {refused}; {_FIX} on this machine")
        return Libraries(None, "llama-cpp-python", f"{LIB_PATH_ENV} ignored: {refused}")
    if environ.get(CHOICE_ENV, "").lower() == "stock":
        if own is None:
            raise LibrariesMissing(
                f"{CHOICE_ENV}=stock, but llama-cpp-python was installed without its own "
                "libraries (CMAKE_ARGS=-DLLAMA_BUILD=OFF); unset it or reinstall llama-cpp-python"
            )
        return Libraries(None, "llama-cpp-python")
    ours = build.lib_dir(flags)
    info = build.read_build_info(ours)
    refused = runnable(ours, info, flags)
    if info is not None and refused is None:
        if info.get("exact_rows"):
            return Libraries(ours, "spec-decode's exact-rows build")
        return Libraries(
            ours,
            "spec-decode's stock build",
            f"spec-decode built stock llama.cpp here ({info.get('fallback_reason')}): "
            "drafted blocks are exact only up to a few tokens",
        )
    if own is not None:
        why = refused or "no spec-decode build for this CPU"
        return Libraries(
            None,
            "llama-cpp-python",
            f"{why}: using llama-cpp-python's own llama.cpp, whose blocks are exact only up to a "
            f"few tokens; {_FIX} for exact blocks of 64",
        )
    raise LibrariesMissing(
        f"{refused or f'no llama.cpp libraries: none in {ours}'}, and llama-cpp-python was "
        f"installed without its own (CMAKE_ARGS=-DLLAMA_BUILD=OFF); {_FIX}"
    )


_chosen: list[Libraries] = []


def load() -> Libraries:
    """Choose the llama.cpp libraries (:func:`choose`), point llama-cpp-python at them and
    import its bindings; the same answer every later call. Raises :class:`LibrariesMissing`
    when none can run here. Where ``llama_cpp`` was imported before any choice, its libraries
    are what this process has, and that is reported."""
    if _chosen:
        return _chosen[0]
    if importlib.util.find_spec("llama_cpp") is None:
        raise ModuleNotFoundError("llama-cpp-python is not installed (the [llama] extra)")
    if "llama_cpp" in sys.modules:
        user = os.environ.get(LIB_PATH_ENV)
        chosen = Libraries(Path(user) if user else None, "imported before spec-decode chose")
    else:
        chosen = choose(os.environ, isa.cpu_flags(), own_library_folder())
        if chosen.folder is not None:
            os.environ[LIB_PATH_ENV] = str(chosen.folder)
        if chosen.warning:
            warnings.warn(chosen.warning, RuntimeWarning, stacklevel=2)
        import llama_cpp  # noqa: F401  (loads the libraries chosen above)
    _chosen.append(chosen)
    return chosen


def bindings() -> ModuleType:
    """llama-cpp-python's ``llama_cpp`` module, after :func:`load`."""
    load()
    import llama_cpp

    return llama_cpp


class _Bindings:
    """``llama_cpp`` for the modules that call llama.cpp, imported at their first call (after
    :func:`load`), so that importing them loads no library. Each name is looked up once."""

    def __getattr__(self, name: str) -> object:
        value = getattr(bindings(), name)
        setattr(self, name, value)
        return value


#: What the backend's modules call llama.cpp through (``from ...library import llama_cpp``).
llama_cpp = _Bindings()
