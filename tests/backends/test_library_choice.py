"""Which llama.cpp libraries spec-decode loads (:mod:`spec_decode.backends.llamacpp.library`), and
what ``build-kernels`` leaves when the exact-rows patch cannot be built.

:func:`choose` is pure, so its cases run with fake CPU flags and fake folders: a build made for a
richer CPU is refused on a poorer one. The subprocess cases check that :func:`load` applies the
choice before llama-cpp-python loads anything, in a fresh interpreter each (libraries load once
per process), against folders laid out like a finished ``build-kernels`` (copies of the libraries
this test process runs, so that they load).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spec_decode.backends.llamacpp import build, isa
from spec_decode.backends.llamacpp.library import (
    CHOICE_ENV,
    LIB_PATH_ENV,
    Libraries,
    LibrariesMissing,
    choose,
)

AVX2 = isa.AVX2_FLAGS
AVX512_VNNI = AVX2 | isa.AVX512_FLAGS | {isa.AVX512_VNNI_FLAG}


def finished_build(folder: Path, flags: frozenset[str], exact_rows: int = 64) -> Path:
    """A build folder as ``build-kernels`` leaves it (no libraries: ``choose`` never opens them)."""
    folder.mkdir(parents=True)
    info = {"cpu_flags": sorted(flags), "exact_rows": exact_rows, "fallback_reason": None}
    (folder / build.BUILD_INFO).write_text(json.dumps(info))
    return folder


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SPEC_DECODE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(build.KERNELS_ENV, raising=False)
    return tmp_path / "cache"


def test_build_folders_are_keyed_by_instruction_set(cache):
    avx2, avx512 = build.lib_dir(AVX2), build.lib_dir(AVX512_VNNI)
    assert avx2 != avx512
    assert avx2.is_relative_to(cache / "kernels") and avx2.parent.name.endswith("-avx2")
    assert avx512.parent.name.endswith("-avx512_vnni")
    assert isa.isa_level({"neon", "asimd"}) is None  # another architecture: stock fallback


def test_this_cpus_build_is_chosen(cache):
    ours = finished_build(build.lib_dir(AVX512_VNNI), isa.required_flags("avx512_vnni"))
    assert choose({}, AVX512_VNNI, own=None) == Libraries(ours, "spec-decode's exact-rows build")


def test_a_build_for_a_richer_cpu_is_refused_on_a_poorer_one(cache, tmp_path):
    """A cache shared with an AVX-512 machine, read on an AVX2 one: never loaded (SIGILL)."""
    rich = finished_build(tmp_path / "rich", isa.required_flags("avx512_vnni"))
    own = tmp_path / "own"
    fallback = choose({LIB_PATH_ENV: str(rich)}, AVX2, own=own)
    assert fallback.folder is None and "avx512" in (fallback.warning or "")
    with pytest.raises(LibrariesMissing, match="avx512"):
        choose({LIB_PATH_ENV: str(rich)}, AVX2, own=None)
    # the same folder under this CPU's key (SPEC_DECODE_KERNELS_DIR pointed at it): refused too
    os.environ[build.KERNELS_ENV] = str(rich.parent)
    try:
        rich_as_ours = build.lib_dir(AVX2)
        finished_build(rich_as_ours, isa.required_flags("avx512"))
        with pytest.raises(LibrariesMissing, match="lacks"):
            choose({}, AVX2, own=None)
        assert choose({}, AVX2, own=own).folder is None
    finally:
        del os.environ[build.KERNELS_ENV]


def test_without_a_build_llama_cpp_pythons_own_libraries_come_with_a_warning(cache, tmp_path):
    chosen = choose({}, AVX2, own=tmp_path / "own")
    assert chosen.folder is None and "build-kernels" in (chosen.warning or "")
    with pytest.raises(LibrariesMissing, match="build-kernels"):
        choose({}, AVX2, own=None)


def test_a_stock_fallback_build_loads_with_a_warning(cache):
    ours = finished_build(build.lib_dir(AVX2), AVX2, exact_rows=0)
    chosen = choose({}, AVX2, own=None)
    assert chosen.folder == ours and "stock" in (chosen.warning or "")


def test_the_user_decides_first(cache, tmp_path):
    finished_build(build.lib_dir(AVX2), isa.required_flags("avx2"))
    own = tmp_path / "own"
    assert choose({CHOICE_ENV: "stock"}, AVX2, own=own) == Libraries(None, "llama-cpp-python")
    theirs = tmp_path / "theirs"
    assert choose({LIB_PATH_ENV: str(theirs)}, AVX2, own=own).folder == theirs
    with pytest.raises(LibrariesMissing, match="LLAMA_BUILD=OFF"):
        choose({CHOICE_ENV: "stock"}, AVX2, own=None)


# --- load() in a fresh interpreter --------------------------------------------------------------

REPORT = (
    "import os, spec_decode.backends.llamacpp as b, sys\n"
    "assert 'llama_cpp' not in sys.modules, 'importing the backend loaded llama.cpp'\n"
    "from spec_decode.backends.llamacpp.library import load\n"
    "print(load().folder)\n"
)


def report(env: dict[str, str]) -> subprocess.CompletedProcess:
    """:data:`REPORT` in a fresh interpreter, under this environment without the library
    choices, plus ``env``."""
    base = {k: v for k, v in os.environ.items() if k not in (LIB_PATH_ENV, CHOICE_ENV)}
    src = str(Path(__file__).resolve().parents[2] / "src")
    base["PYTHONPATH"] = src + os.pathsep + base.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-c", REPORT],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def loaded_folder(env: dict[str, str]) -> str:
    out = report(env)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def running_libraries() -> Path:
    """The folder of the llama.cpp libraries this test process runs."""
    pytest.importorskip("llama_cpp")
    from spec_decode.backends.llamacpp.library import load, own_library_folder

    folder = load().folder or own_library_folder()
    assert folder is not None
    return folder


def test_load_applies_this_cpus_build(running_libraries, tmp_path):
    kernels = tmp_path / "kernels"
    shutil.copytree(running_libraries, kernels / "lib", symlinks=True)
    info = {"cpu_flags": sorted(isa.cpu_flags() & AVX2), "exact_rows": 64}
    (kernels / "lib" / build.BUILD_INFO).write_text(json.dumps(info))
    assert loaded_folder({build.KERNELS_ENV: str(kernels)}) == str(kernels / "lib")


def test_load_refuses_a_build_this_cpu_cannot_run(running_libraries, tmp_path):
    kernels = tmp_path / "kernels"
    shutil.copytree(running_libraries, kernels / "lib", symlinks=True)
    info = {"cpu_flags": ["avx512_imaginary"], "exact_rows": 64}
    (kernels / "lib" / build.BUILD_INFO).write_text(json.dumps(info))
    out = report({build.KERNELS_ENV: str(kernels), LIB_PATH_ENV: str(kernels / "lib")})
    from spec_decode.backends.llamacpp.library import own_library_folder

    if own_library_folder() is None:
        assert out.returncode != 0 and "avx512_imaginary" in out.stderr
    else:
        assert out.stdout.strip().splitlines()[-1] == "None"
        assert "avx512_imaginary" in out.stderr


# --- build-kernels when the patch cannot be built -----------------------------------------------


def test_a_failed_patched_build_falls_back_to_stock(cache, tmp_path, monkeypatch):
    """The patch fails to apply (here: a patch for other sources): build() warns, compiles the
    unpatched source with the stock arguments, and records a build that loads with a warning."""
    if shutil.which("cmake") is None or shutil.which("patch") is None:
        pytest.skip("needs cmake and patch")
    sdist = tmp_path / build.SDIST_NAME
    make_fake_sdist(sdist)
    monkeypatch.setattr(build, "SDIST_SHA256", build.sha256_of(sdist))
    bad_patch = tmp_path / "exact-rows.patch"
    bad_patch.write_text("--- a/nothing.c\n+++ b/nothing.c\n@@ -1 +1 @@\n-a\n+b\n")
    monkeypatch.setattr(build, "PATCH", bad_patch)
    compiled: list[tuple[str, ...]] = []

    def fake_compile(source, build_tree, args, jobs, staging):
        compiled.append(args)
        staging.mkdir(parents=True, exist_ok=True)
        (staging / "libllama.so").write_text("")

    monkeypatch.setattr(build, "compile_libraries", fake_compile)
    logs: list[str] = []
    folder = build.build(sdist=sdist, flags=AVX2, log=logs.append)
    assert compiled == [build.STOCK_ARGS]  # the patched compile never started
    info = build.read_build_info(folder)
    assert info is not None and info["exact_rows"] == 0 and info["fallback_reason"]
    assert any(line.startswith("warning:") and "stock" in line for line in logs)
    chosen = choose({}, AVX2, own=None)
    assert chosen.folder == folder and chosen.warning


def make_fake_sdist(path: Path) -> None:
    """A tarball laid out like llama-cpp-python's sdist, with a one-file vendored llama.cpp."""
    import tarfile

    root = path.parent / "fake"
    source = root / f"llama_cpp_python-{build.SDIST_VERSION}" / "vendor" / "llama.cpp"
    source.mkdir(parents=True)
    (source / "CMakeLists.txt").write_text("project(fake)\n")
    with tarfile.open(path, "w:gz") as tar:
        tar.add(root / f"llama_cpp_python-{build.SDIST_VERSION}", arcname=source.parents[1].name)


def test_build_kernels_refuses_an_sdist_that_is_not_the_pinned_one(tmp_path, cache):
    """A wrong ``--sdist`` is bad input: exit 2 naming the sha256, nothing built or replaced."""
    if shutil.which("cmake") is None:
        pytest.skip("needs cmake")
    from typer.testing import CliRunner

    from spec_decode.cli.app import app

    wrong = tmp_path / build.SDIST_NAME
    wrong.write_bytes(b"not an sdist")
    result = CliRunner().invoke(app, ["build-kernels", "--sdist", str(wrong), "--force"])
    assert result.exit_code == 2 and "sha256" in result.output
    assert not build.lib_dir().exists()
