"""Build llama.cpp's shared libraries with the exact-rows patch (``spec-decode build-kernels``).

The patch (``patches/exact-rows.patch``, against the llama.cpp that llama-cpp-python 0.3.36
vendors) makes the CPU kernels score every row of a block of tokens bitwise equal to the same token
scored alone, at llama.cpp's speed (see the patch's comments and ``bench/results/
kernels_findings.md``):

- Q4_K weights (repacked 8x8 on AVX2 and AVX-512): the 4-row GEMM applied the scales with one FMA
  per pair of sub-blocks, the one-row GEMV with one per super-block; the GEMM (its AVX2 and its
  AVX-512 code) now does what the GEMV does.
- Q6_K weights: batches of 8+ rows take the tiled kernel (one integer per super-block, scaled
  in a fixed order), fewer rows ``ggml_vec_dot_q6_K_q8_K`` (eight float lanes summed at the end);
  the vec_dot now computes what the tiled kernel computes, and the tiled kernel's AVX-512 VNNI
  variant ends in the same explicit FMA as its AVX2 one.
- Attention's f16 matmuls (K·Q, V·softmax): llamafile's tinyBLAS, batch-invariant itself, took
  them for 2+ rows and ggml's vec path for one, which sums in another order; tinyBLAS now takes
  f16 x f16 at every row count (one row split statically, without its barriers) and no other
  type, so blocks run attention as fast as the default build's batches and stay exact.

Everything else on this model's graph (norms, RoPE, attention without flash attention, softmax,
the activation quantization) is already row-independent.

The source comes from the pinned llama-cpp-python sdist, fetched through pip from the package
registry (or given as a file) and checked against :data:`SDIST_SHA256`. The libraries land in the
user cache (:func:`kernels_dir`); point ``LLAMA_CPP_LIB_PATH`` at its ``lib`` folder and
llama-cpp-python loads them instead of its own. The patched ``libggml-cpu`` exports
``spec_decode_exact_rows()``, which :mod:`spec_decode.backends.llamacpp.kernels` reads back from the
library actually loaded; ``build-info.json`` beside the libraries records what was built from what.
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

SDIST_VERSION = "0.3.36"
SDIST_NAME = f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
#: sha256 of the sdist on the registry (checked before anything is unpacked).
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
#: The llama.cpp commit the sdist vendors (for the record; the sha256 above pins the source).
LLAMA_CPP_COMMIT = "0c1e570"
PATCH = Path(__file__).with_name("patches") / "exact-rows.patch"
#: Environment variable that overrides where the patched build goes.
KERNELS_ENV = "SPEC_DECODE_KERNELS_DIR"
BUILD_INFO = "build-info.json"
#: The targets built: the shared libraries llama-cpp-python loads, nothing else.
TARGETS = ("llama", "ggml", "ggml-base", "ggml-cpu")
CMAKE_ARGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON",
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
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_BUILD_COMMON=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DCMAKE_BUILD_RPATH=$ORIGIN",  # the copied libraries find each other beside themselves
)

#: The CPU flags of the AVX-512 subsets llama.cpp's GGML_AVX512 compiles for.
AVX512_FLAGS = frozenset({"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"})
#: The CPU flag of AVX-512 VNNI (its integer dot products drive the tiled Q6_K kernel).
AVX512_VNNI_FLAG = "avx512_vnni"


def cmake_args(cpu_flags: frozenset[str] | set[str]) -> tuple[str, ...]:
    """:data:`CMAKE_ARGS`, plus llama.cpp's AVX-512 kernels where the CPU has every subset they
    use (``cpu_flags`` as /proc/cpuinfo names them), and AVX-512 VNNI where it has that too: on
    such a CPU these batch kernels are faster than the AVX2 ones (the VNNI tiled kernel most of
    all, for the Q6_K output layer), and the patch covers them."""
    flags = set(cpu_flags)
    if not flags >= AVX512_FLAGS:
        return CMAKE_ARGS
    vnni = ("-DGGML_AVX512_VNNI=ON",) if AVX512_VNNI_FLAG in flags else ()
    return (*CMAKE_ARGS, "-DGGML_AVX512=ON", *vnni)


def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags as /proc/cpuinfo lists them (empty where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def patch_sha256() -> str:
    return hashlib.sha256(PATCH.read_bytes()).hexdigest()


def kernels_dir() -> Path:
    """Where the patched build lives: ``$SPEC_DECODE_KERNELS_DIR`` or the user cache, one folder
    per sdist version and patch content (a changed patch builds afresh)."""
    override = os.environ.get(KERNELS_ENV)
    if override:
        return Path(override)
    import platformdirs

    name = f"llama-cpp-python-{SDIST_VERSION}-exact-rows-{patch_sha256()[:12]}"
    return platformdirs.user_cache_path("spec-decode") / "kernels" / name


def lib_dir() -> Path:
    """The folder to point ``LLAMA_CPP_LIB_PATH`` at."""
    return kernels_dir() / "lib"


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


def build(
    sdist: Path | None = None,
    jobs: int = 2,
    work_dir: Path | None = None,
    keep_work: bool = False,
    log: Callable[[str], None] = print,
) -> Path:
    """Build the patched shared libraries into :func:`lib_dir` and return that folder.

    ``sdist`` is the llama-cpp-python sdist (downloaded with pip when None); ``jobs`` is the
    compiler parallelism (``cmake --build -j``); ``work_dir`` holds the unpacked source and the
    build tree (a temporary folder, removed afterwards unless ``keep_work``).
    """
    if shutil.which("cmake") is None:
        raise RuntimeError("cmake is needed to build llama.cpp (pip install cmake)")
    started = time.time()
    own_work = work_dir is None
    work = Path(tempfile.mkdtemp(prefix="spec-decode-kernels-")) if own_work else Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    try:
        if sdist is None:
            sdist = fetch_sdist(work / "sdist", log)
        check_sdist(sdist)
        log(f"sdist sha256 ok ({SDIST_SHA256[:12]})")
        source = unpack_llama_cpp(sdist, work / "src")
        apply_patch(source, log)
        build_tree = work / "build"
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        args = cmake_args(cpu_flags())
        subprocess.run(
            ["cmake", "-S", str(source), "-B", str(build_tree), *generator, *args],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        log(f"compiling {', '.join(TARGETS)} with -j {jobs} (several minutes)")
        subprocess.run(
            ["cmake", "--build", str(build_tree), "--target", *TARGETS, "-j", str(jobs)], check=True
        )
        dest = lib_dir()
        staging = dest.with_name(dest.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for lib in sorted(build_tree.rglob("lib*.so*")):
            if lib.name.startswith(("libllama.", "libggml")):
                target = staging / lib.name
                if lib.is_symlink():
                    target.symlink_to(os.readlink(lib))
                else:
                    shutil.copy2(lib, target)
        exact_rows = marker_of(staging)
        if exact_rows <= 0:
            raise RuntimeError(
                "the patched libraries load but report no exact rows: this build takes kernels "
                "the patch does not cover (it covers x86 AVX2 and AVX-512, VNNI included); stock "
                "3-token blocks remain"
            )
        info = {
            "what": "llama.cpp shared libraries with spec-decode's exact-rows patch",
            "llama_cpp_python_sdist": SDIST_NAME,
            "sdist_sha256": SDIST_SHA256,
            "llama_cpp_commit": LLAMA_CPP_COMMIT,
            "patch": PATCH.name,
            "patch_sha256": patch_sha256(),
            "cmake_args": list(args),
            "exact_rows": exact_rows,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "build_seconds": round(time.time() - started, 1),
        }
        (staging / BUILD_INFO).write_text(json.dumps(info, indent=1) + "\n")
        shutil.rmtree(dest, ignore_errors=True)
        staging.rename(dest)
        log(f"built in {info['build_seconds']:.0f} s: {dest} (exact blocks up to {exact_rows})")
        return dest
    finally:
        if own_work and not keep_work:
            shutil.rmtree(work, ignore_errors=True)
