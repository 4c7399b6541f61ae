"""The CPU's instruction sets, as /proc/cpuinfo names them, and what a kernels build needs of
them: which level of the exact-rows build a CPU gets (AVX2, AVX-512, with VNNI and BF16 where the
CPU has them), and which flags
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
#: The CPU flag of AVX-512 BF16 (its bf16 dot products drive tinyBLAS on BF16 weights).
AVX512_BF16_FLAG = "avx512_bf16"
#: The AVX-512 extensions a level may add, in the order its name lists them.
_AVX512_EXTENSIONS = (AVX512_VNNI_FLAG, AVX512_BF16_FLAG)
#: Flags (prefixes, as /proc/cpuinfo names them) of the instruction sets a native build may use.
_ISA_PREFIXES = ("sse", "ssse", "avx", "fma", "f16c", "bmi", "amx", "popcnt", "asimd", "sve")


def native_flags(flags: frozenset[str] | set[str]) -> frozenset[str]:
    """The flags among ``flags`` whose instructions a native build (``-DGGML_NATIVE=ON``) may
    use, so needs to run."""
    return frozenset(f for f in flags if f.startswith(_ISA_PREFIXES))


def isa_level(cpu_flags: frozenset[str] | set[str]) -> str | None:
    """The instruction-set level the exact-rows build compiles for on a CPU with ``cpu_flags``:
    ``avx2``, or ``avx512`` followed by ``_vnni`` and ``_bf16`` for the extensions the CPU has;
    None where the patch does not apply (no AVX2, or not x86)."""
    flags = set(cpu_flags)
    if not flags >= AVX2_FLAGS:
        return None
    if not flags >= AVX512_FLAGS:
        return "avx2"
    extensions = [f.removeprefix("avx512") for f in _AVX512_EXTENSIONS if f in flags]
    return "avx512" + "".join(extensions)


def level_extensions(level: str) -> frozenset[str]:
    """The AVX-512 extensions (their CPU flags) a build of ``level`` compiles for."""
    return frozenset(f for f in _AVX512_EXTENSIONS if f.removeprefix("avx512") in level)


def required_flags(level: str) -> frozenset[str]:
    """The CPU flags a build of ``level`` (:func:`isa_level`) needs to run."""
    if level == "avx2":
        return AVX2_FLAGS
    return AVX2_FLAGS | AVX512_FLAGS | level_extensions(level)


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
