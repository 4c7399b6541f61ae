"""The CPU's instruction sets, as /proc/cpuinfo names them, and what a kernels build needs of
them: which level of the exact-rows build a CPU gets (AVX2, AVX-512, AVX-512 VNNI), and which flags
a build of each level (or a native stock build) needs to run, so that no CPU loads a build it
cannot run (:mod:`spec_decode.backends.llamacpp.library` checks before loading)."""

from __future__ import annotations

from pathlib import Path

#: The CPU flags the exact-rows build always compiles for (``build.CMAKE_ARGS``).
AVX2_FLAGS = frozenset({"sse4_2", "avx", "avx2", "bmi2", "fma", "f16c"})
#: The CPU flags of the AVX-512 subsets llama.cpp's GGML_AVX512 compiles for.
AVX512_FLAGS = frozenset({"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"})
#: The CPU flag of AVX-512 VNNI (its integer dot products drive the tiled Q6_K kernel).
AVX512_VNNI_FLAG = "avx512_vnni"
#: Flags (prefixes, as /proc/cpuinfo names them) of the instruction sets a native build may use.
_ISA_PREFIXES = ("sse", "ssse", "avx", "fma", "f16c", "bmi", "amx", "popcnt", "asimd", "sve")


def native_flags(flags: frozenset[str] | set[str]) -> frozenset[str]:
    """The flags among ``flags`` whose instructions a native build (``-DGGML_NATIVE=ON``) may
    use, so needs to run."""
    return frozenset(f for f in flags if f.startswith(_ISA_PREFIXES))


def isa_level(cpu_flags: frozenset[str] | set[str]) -> str | None:
    """The instruction-set level the exact-rows build compiles for on a CPU with ``cpu_flags``:
    ``avx512_vnni``, ``avx512`` or ``avx2``; None where the patch does not apply (no AVX2, or
    not x86)."""
    flags = set(cpu_flags)
    if not flags >= AVX2_FLAGS:
        return None
    if not flags >= AVX512_FLAGS:
        return "avx2"
    return "avx512_vnni" if AVX512_VNNI_FLAG in flags else "avx512"


def required_flags(level: str) -> frozenset[str]:
    """The CPU flags a build of ``level`` (:func:`isa_level`) needs to run."""
    needed = {"avx2": AVX2_FLAGS, "avx512": AVX2_FLAGS | AVX512_FLAGS}
    return needed.get(level, AVX2_FLAGS | AVX512_FLAGS | {AVX512_VNNI_FLAG})


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
