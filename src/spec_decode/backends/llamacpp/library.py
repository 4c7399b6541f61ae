"""Which llama.cpp libraries llama-cpp-python loads: the exact-rows build once this machine has it.

llama-cpp-python loads its shared libraries once, when ``llama_cpp`` is first imported, from
``LLAMA_CPP_LIB_PATH`` or else from its own folder. :func:`choose_libraries` runs before that
import (this package's ``__init__`` calls it first) and points ``LLAMA_CPP_LIB_PATH`` at the
exact-rows build that ``spec-decode build-kernels`` made for the installed llama-cpp-python, when
there is one and nothing else was asked for. ``LLAMA_CPP_LIB_PATH`` set by the user always wins;
``SPEC_DECODE_KERNELS=stock`` keeps llama-cpp-python's own libraries.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys

from spec_decode.backends.llamacpp.build import BUILD_INFO, SDIST_VERSION, lib_dir

#: Environment variable choosing the libraries: ``stock`` for llama-cpp-python's own.
CHOICE_ENV = "SPEC_DECODE_KERNELS"
LIB_PATH_ENV = "LLAMA_CPP_LIB_PATH"


def choose_libraries() -> str | None:
    """Set ``LLAMA_CPP_LIB_PATH`` to the exact-rows build if it applies; return what it is set
    to (None: llama-cpp-python's own libraries). Too late once ``llama_cpp`` is imported."""
    if LIB_PATH_ENV in os.environ or "llama_cpp" in sys.modules:
        return os.environ.get(LIB_PATH_ENV)
    if os.environ.get(CHOICE_ENV, "").lower() == "stock":
        return None
    try:
        installed = importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        return None
    folder = lib_dir()
    if installed != SDIST_VERSION or not (folder / BUILD_INFO).is_file():
        return None  # built for another llama-cpp-python, or never built
    os.environ[LIB_PATH_ENV] = str(folder)
    return str(folder)
