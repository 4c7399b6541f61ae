"""Which llama.cpp libraries spec-decode loads (:mod:`spec_decode.backends.llamacpp.library`):
the exact-rows build once built, unless the user says otherwise.

Each case runs in a fresh interpreter (llama-cpp-python loads its libraries once per process) with
``SPEC_DECODE_KERNELS_DIR`` pointing at a folder laid out like a finished ``build-kernels``
(``lib/build-info.json`` beside the libraries; here copies of llama-cpp-python's own, so that they
load), and reports the ``LLAMA_CPP_LIB_PATH`` in force after importing the backend.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")

REPORT = (
    "import os, spec_decode.backends.llamacpp as b, llama_cpp.llama_cpp as l\n"
    "print(os.environ.get('LLAMA_CPP_LIB_PATH'))\n"
)


def own_libraries() -> Path:
    """llama-cpp-python's own library folder (found without importing it)."""
    spec = importlib.util.find_spec("llama_cpp")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent / "lib"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A kernels folder as ``build-kernels`` leaves it."""
    folder = tmp_path_factory.mktemp("kernels")
    shutil.copytree(own_libraries(), folder / "lib", symlinks=True)
    (folder / "lib" / "build-info.json").write_text(json.dumps({"exact_rows": 64}))
    return folder


def loaded(env: dict[str, str]) -> str:
    base = dict(os.environ)
    for name in ("LLAMA_CPP_LIB_PATH", "SPEC_DECODE_KERNELS"):
        base.pop(name, None)
    src = str(Path(__file__).resolve().parents[2] / "src")
    base["PYTHONPATH"] = src + os.pathsep + base.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-c", REPORT],
        env={**base, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return out.stdout.strip().splitlines()[-1]


def test_a_finished_build_is_loaded(built):
    assert loaded({"SPEC_DECODE_KERNELS_DIR": str(built)}) == str(built / "lib")


def test_stock_keeps_llama_cpp_pythons_own_libraries(built):
    env = {"SPEC_DECODE_KERNELS_DIR": str(built), "SPEC_DECODE_KERNELS": "stock"}
    assert loaded(env) == "None"


def test_the_users_library_path_wins(built):
    own = str(own_libraries())
    env = {"SPEC_DECODE_KERNELS_DIR": str(built), "LLAMA_CPP_LIB_PATH": own}
    assert loaded(env) == own


def test_no_build_loads_the_stock_libraries(tmp_path):
    assert loaded({"SPEC_DECODE_KERNELS_DIR": str(tmp_path / "never-built")}) == "None"
