"""Build llama.cpp's shared libraries with the exact-rows patch (``spec-decode build-kernels``).

The patch (``patches/exact-rows.patch``, against the llama.cpp that llama-cpp-python 0.3.36
vendors) makes the CPU kernels score every row of a block of tokens bitwise equal to the same token
scored alone, at llama.cpp's speed (see the patch's comments and ``bench/results/
kernels_findings.md``):

- Q4_K weights (repacked 8x8 on AVX2 and AVX-512) and Q2_K weights (repacked on AVX-512): the
  4-row GEMM applied the scales with one FMA per group of sub-blocks, the one-row GEMV with one
  per super-block; the GEMM (its AVX2 and its AVX-512 code) now does what the GEMV does.
- Q6_K, Q5_K, Q3_K, Q2_K and IQ4_XS weights: batches of 8+ rows take the tiled kernel (integers
  per super-block, scaled in a fixed order), fewer rows the type's ``vec_dot`` (eight float lanes
  summed at the end); each vec_dot now computes what the tiled kernel computes (one helper,
  ``spec_decode_superblock``), and the tiled kernel's AVX-512 VNNI variant ends in the same
  explicit FMA as its AVX2 one.
- Attention's f16 matmuls (K·Q, V·softmax): llamafile's tinyBLAS, batch-invariant itself, took
  them for 2+ rows and ggml's vec path for one, which sums in another order; tinyBLAS now takes
  f16 x f16 at every row count (one row split statically, without its barriers) and no other
  type, so blocks run attention as fast as the default build's batches and stay exact.
- Flash attention computes each query row as alone over the cache's cells in their order, and a
  unified cache places each sequence's tokens after its last cell: the server's slots then share
  one cache, and so one pass a call, each row exactly its own sequence's
  (:func:`~spec_decode.backends.llamacpp.kernels.ordered_cells`).

Everything else on this model's graph (norms, RoPE, softmax, the activation quantization) is
already row-independent.

The source comes from the pinned llama-cpp-python sdist, fetched through pip from the package
registry (or given as a file) and checked against :data:`SDIST_SHA256`. The libraries land in the
spec-decode cache (:func:`kernels_dir`), one folder per sdist, patch and instruction-set level
(:func:`isa_level`), so a cache shared by several CPUs never hands one of them a build it cannot
run; :func:`spec_decode.backends.llamacpp.library.load` checks the recorded flags before loading.
The patched ``libggml-cpu`` exports ``spec_decode_exact_rows()``, which
:mod:`spec_decode.backends.llamacpp.kernels` reads back from the library actually loaded, and
``spec_decode_stop_requested()``, the abort callback that lets the server interrupt a call;
``build-info.json`` beside the libraries records what was built from what.

Where the patch cannot be built or does not apply to this CPU (no AVX2, another architecture, a
failed compile, a build that reports no exact rows), :func:`build` builds the same source
unpatched instead (``-DGGML_LLAMAFILE=OFF``, native instruction sets): a stock llama.cpp whose
blocks of up to 3 tokens are exact, so speculation stays exact, only shorter.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from spec_decode.backends.cache import cache_root
from spec_decode.backends.llamacpp.isa import (
    AVX512_BF16_FLAG,
    AVX512_VNNI_FLAG,
    cpu_flags,
    isa_level,
    level_extensions,
    native_flags,
    required_flags,
)

SDIST_VERSION = "0.3.36"
SDIST_NAME = f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
#: sha256 of the sdist on the registry (checked before anything is unpacked).
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
#: The llama.cpp commit the sdist vendors (for the record; the sha256 above pins the source).
LLAMA_CPP_COMMIT = "0c1e570"
PATCH = Path(__file__).with_name("patches") / "exact-rows.patch"
#: Environment variable that overrides where the build goes (default: under the cache root).
KERNELS_ENV = "SPEC_DECODE_KERNELS_DIR"
BUILD_INFO = "build-info.json"
#: The targets built: the shared libraries llama-cpp-python loads, nothing else.
TARGETS = ("llama", "ggml", "ggml-base", "ggml-cpu")
_COMMON_ARGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_BUILD_COMMON=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DCMAKE_BUILD_RPATH=$ORIGIN",  # the copied libraries find each other beside themselves
)
#: The fallback: llama.cpp unpatched, as the README once built it (blocks of up to 3 exact).
STOCK_ARGS = (*_COMMON_ARGS, "-DGGML_NATIVE=ON", "-DGGML_LLAMAFILE=OFF")
CMAKE_ARGS = (
    # The instruction sets whose kernels the patch makes exact, not the native set (which may
    # take variants the patch never saw). AVX-512 and its VNNI are added where the CPU has them
    # (cmake_args).
    "-DGGML_NATIVE=OFF",
    "-DGGML_SSE42=ON",
    "-DGGML_AVX=ON",
    "-DGGML_AVX2=ON",
    "-DGGML_BMI2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
    "-DGGML_AVX_VNNI=OFF",  # AVX-VNNI without AVX-512: never checked
    "-DGGML_LLAMAFILE=ON",  # tinyBLAS for f16 at every row count (the patch's third hunk)
    *_COMMON_ARGS,
)


#: The cmake option that compiles llama.cpp's kernels for each AVX-512 extension a level names.
_EXTENSION_OPTIONS = {
    AVX512_VNNI_FLAG: "-DGGML_AVX512_VNNI=ON",
    AVX512_BF16_FLAG: "-DGGML_AVX512_BF16=ON",
}


def cmake_args(cpu_flags: frozenset[str] | set[str]) -> tuple[str, ...]:
    """:data:`CMAKE_ARGS`, plus llama.cpp's AVX-512 kernels where the CPU has every subset they
    use (``cpu_flags`` as /proc/cpuinfo names them), and AVX-512 VNNI and BF16 where it has
    those too: on such a CPU these batch kernels are faster than the AVX2 ones (the VNNI tiled
    kernel most of all, for the Q6_K output layer; BF16's dot products for BF16 weights), and
    the patch covers them."""
    level = isa_level(cpu_flags)
    if level in (None, "avx2"):
        return CMAKE_ARGS
    extensions = level_extensions(level)
    options = (option for flag, option in _EXTENSION_OPTIONS.items() if flag in extensions)
    return (*CMAKE_ARGS, "-DGGML_AVX512=ON", *options)


def patch_sha256() -> str:
    return hashlib.sha256(PATCH.read_bytes()).hexdigest()


def build_key(flags: frozenset[str] | set[str]) -> str:
    """The build folder's name on a CPU with ``flags``: sdist version, patch content and
    instruction-set level (``native-<hash of the flags>`` where the patch does not apply, since
    the stock fallback is compiled for exactly this CPU)."""
    level = isa_level(flags)
    if level is None:
        level = "native-" + hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest()[:8]
    return f"llama-cpp-python-{SDIST_VERSION}-exact-rows-{patch_sha256()[:12]}-{level}"


def kernels_dir(flags: frozenset[str] | set[str] | None = None) -> Path:
    """Where the build for a CPU with ``flags`` (default: this one) lives:
    ``$SPEC_DECODE_KERNELS_DIR``, else ``kernels/`` under the cache root (``$SPEC_DECODE_CACHE``
    or the user cache), one folder per :func:`build_key`."""
    override = os.environ.get(KERNELS_ENV)
    if override:
        return Path(override).expanduser()
    return cache_root() / "kernels" / build_key(cpu_flags() if flags is None else flags)


def lib_dir(flags: frozenset[str] | set[str] | None = None) -> Path:
    """The folder holding the libraries (what ``LLAMA_CPP_LIB_PATH`` should name)."""
    return kernels_dir(flags) / "lib"


def read_build_info(folder: Path | None = None) -> dict | None:
    """The ``build-info.json`` beside a patched build's libraries, or None if there is none."""
    path = (folder or lib_dir()) / BUILD_INFO
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_sdist(dest: Path, log: Callable[[str], None] = print) -> Path:
    """Download the pinned sdist with pip (the package registry, nothing else) into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    log(f"downloading llama-cpp-python=={SDIST_VERSION} (source) with pip")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-binary",
            ":all:",
            "--no-deps",
            f"llama-cpp-python=={SDIST_VERSION}",
            "-d",
            str(dest),
        ],
        check=True,
    )
    return dest / SDIST_NAME


def check_sdist(path: Path) -> None:
    got = sha256_of(path)
    if got != SDIST_SHA256:
        raise ValueError(
            f"{path}: sha256 {got}, expected {SDIST_SHA256} (llama-cpp-python "
            f"{SDIST_VERSION}'s sdist); refusing to build from it"
        )


def unpack_llama_cpp(sdist: Path, work: Path) -> Path:
    """Extract only ``vendor/llama.cpp`` of the sdist into ``work``; return that folder."""
    prefix = f"llama_cpp_python-{SDIST_VERSION}/vendor/llama.cpp/"
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        if not members:
            raise ValueError(f"{sdist} has no {prefix}")
        tar.extractall(work, members=members, filter="data")
    return work / prefix


def apply_patch(source: Path, log: Callable[[str], None] = print) -> None:
    log(f"applying {PATCH.name} (sha256 {patch_sha256()[:12]})")
    subprocess.run(
        ["patch", "-p1", "--forward", "--batch", "-i", str(PATCH)],
        cwd=source,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def marker_of(folder: Path) -> int:
    """``spec_decode_exact_rows()`` of the libraries in ``folder``, read in a fresh process
    through llama-cpp-python (exactly as the backend will load them); 0 if absent."""
    code = (
        "import llama_cpp.llama_cpp as l\n"
        "f = getattr(l._lib, 'spec_decode_exact_rows', None)\n"
        "print(0 if f is None else int(f()))\n"
    )
    env = dict(os.environ, LLAMA_CPP_LIB_PATH=str(folder))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    )
    return int(out.stdout.strip().splitlines()[-1])


def compile_libraries(
    source: Path, build_tree: Path, args: tuple[str, ...], jobs: int, staging: Path
) -> None:
    """Configure and compile llama.cpp's shared libraries (:data:`TARGETS`) from ``source`` with
    cmake ``args``, and copy them (symlinks kept) into ``staging``."""
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(
        ["cmake", "-S", str(source), "-B", str(build_tree), *generator, *args],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(
        ["cmake", "--build", str(build_tree), "--target", *TARGETS, "-j", str(jobs)], check=True
    )
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for lib in sorted(build_tree.rglob("lib*.so*")):
        if lib.name.startswith(("libllama.", "libggml")):
            target = staging / lib.name
            if lib.is_symlink():
                target.symlink_to(os.readlink(lib))
            else:
                shutil.copy2(lib, target)


def build(
    sdist: Path | None = None,
    jobs: int = 2,
    work_dir: Path | None = None,
    keep_work: bool = False,
    log: Callable[[str], None] = print,
    flags: frozenset[str] | None = None,
) -> Path:
    """Build llama.cpp's shared libraries into :func:`lib_dir` and return that folder: the
    exact-rows build where the patch applies to this CPU, else (with a warning through ``log``)
    the stock one.

    ``sdist`` is the llama-cpp-python sdist (downloaded with pip when None); ``jobs`` is the
    compiler parallelism (``cmake --build -j``); ``work_dir`` holds the unpacked source and the
    build tree (a temporary folder, removed afterwards unless ``keep_work``); ``flags`` are the
    CPU's (default: this one's).
    """
    if shutil.which("cmake") is None:
        raise RuntimeError("cmake is needed to build llama.cpp (pip install cmake)")
    started = time.time()
    flags = cpu_flags() if flags is None else flags
    own_work = work_dir is None
    work = Path(tempfile.mkdtemp(prefix="spec-decode-kernels-")) if own_work else Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    dest = lib_dir(flags)
    staging = dest.with_name(dest.name + ".partial")
    try:
        if sdist is None:
            sdist = fetch_sdist(work / "sdist", log)
        check_sdist(sdist)
        log(f"sdist sha256 ok ({SDIST_SHA256[:12]})")
        level, exact_rows, args = isa_level(flags), 0, STOCK_ARGS
        fallback = "this CPU lacks the AVX2 kernels the patch covers" if level is None else None
        if level is not None:
            try:
                source = unpack_llama_cpp(sdist, work / "src")
                apply_patch(source, log)
                log(f"compiling the exact-rows {', '.join(TARGETS)} with -j {jobs} (minutes)")
                patched = cmake_args(flags)
                compile_libraries(source, work / "build", patched, jobs, staging)
                exact_rows = marker_of(staging)
                if exact_rows <= 0:
                    raise RuntimeError("the patched libraries report no exact rows")
                args = patched
            except (subprocess.CalledProcessError, RuntimeError, OSError) as error:
                fallback = f"the exact-rows build failed: {error}"
        if fallback is not None:
            log(
                f"warning: {fallback}. Building stock llama.cpp instead: drafted blocks of up "
                "to 3 tokens stay exact, longer ones are split."
            )
            source = unpack_llama_cpp(sdist, work / "src-stock")
            compile_libraries(source, work / "build-stock", STOCK_ARGS, jobs, staging)
        needs = required_flags(level) if exact_rows else native_flags(flags)
        info = {
            "what": "llama.cpp shared libraries built by spec-decode "
            + ("with its exact-rows patch" if exact_rows else "without its patch (fallback)"),
            "llama_cpp_python_sdist": SDIST_NAME,
            "sdist_sha256": SDIST_SHA256,
            "llama_cpp_commit": LLAMA_CPP_COMMIT,
            "patch": PATCH.name if exact_rows else None,
            "patch_sha256": patch_sha256(),
            "cmake_args": list(args),
            "cpu_flags": sorted(needs),
            "exact_rows": exact_rows,
            "fallback_reason": fallback,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "build_seconds": round(time.time() - started, 1),
        }
        (staging / BUILD_INFO).write_text(json.dumps(info, indent=1) + "\n")
        shutil.rmtree(dest, ignore_errors=True)
        staging.rename(dest)
        what = f"exact blocks up to {exact_rows}" if exact_rows else "stock: exact blocks up to 3"
        log(f"built in {info['build_seconds']:.0f} s: {dest} ({what})")
        return dest
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if own_work and not keep_work:
            shutil.rmtree(work, ignore_errors=True)
