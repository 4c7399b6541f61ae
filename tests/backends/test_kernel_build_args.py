"""What ``spec-decode build-kernels`` asks cmake for: the instruction sets the exact-rows patch
covers (AVX2; AVX-512 where the CPU has all of it, and its VNNI and BF16 where the CPU has those
too), never a native build nor AVX-VNNI without AVX-512, which the patch was never checked on."""

from __future__ import annotations

import platform
from pathlib import Path

from spec_decode.backends.llamacpp.build import CMAKE_ARGS, cmake_args
from spec_decode.backends.llamacpp.isa import AVX512_FLAGS, cpu_flags, isa_level, required_flags

AVX2_CPU = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"})


def test_an_avx2_cpu_gets_the_avx2_kernels_only():
    args = cmake_args(AVX2_CPU | {"avx_vnni"})
    assert args == CMAKE_ARGS
    assert "-DGGML_NATIVE=OFF" in args and "-DGGML_AVX2=ON" in args
    assert "-DGGML_AVX_VNNI=OFF" in args
    assert not any(a.startswith("-DGGML_AVX512") or a.endswith("VNNI=ON") for a in args)


def test_an_avx512_cpu_gets_the_avx512_kernels_and_vnni_and_bf16_where_it_has_them():
    args = cmake_args(AVX2_CPU | AVX512_FLAGS | {"avx512_vnni", "avx512_bf16", "avx512vbmi"})
    assert "-DGGML_AVX512=ON" in args and "-DGGML_AVX512_VNNI=ON" in args
    assert "-DGGML_AVX512_BF16=ON" in args and "-DGGML_AVX_VNNI=OFF" in args
    assert not any(a == "-DGGML_NATIVE=ON" or a.startswith("-DGGML_AVX512_VBMI") for a in args)
    without_vnni = cmake_args(AVX2_CPU | AVX512_FLAGS)
    assert "-DGGML_AVX512=ON" in without_vnni
    assert not any(a.endswith(("VNNI=ON", "BF16=ON")) for a in without_vnni)


def test_a_cpu_missing_one_avx512_subset_stays_on_avx2():
    assert cmake_args(AVX2_CPU | (AVX512_FLAGS - {"avx512bw"}) | {"avx512_vnni"}) == CMAKE_ARGS


def test_cpu_flags_reads_this_machine():
    flags = cpu_flags()
    assert isinstance(flags, frozenset) and all(isinstance(f, str) for f in flags)
    if platform.machine() in ("x86_64", "AMD64") and Path("/proc/cpuinfo").exists():
        assert "sse2" in flags  # every x86-64 CPU has it: the flags were read, not skipped


def test_the_build_key_names_the_instruction_sets():
    assert isa_level(AVX2_CPU) == "avx2"
    assert isa_level(AVX2_CPU | AVX512_FLAGS) == "avx512"
    assert isa_level(AVX2_CPU | AVX512_FLAGS | {"avx512_vnni"}) == "avx512_vnni"
    assert isa_level(AVX2_CPU | AVX512_FLAGS | {"avx512_bf16"}) == "avx512_bf16"
    both = AVX2_CPU | AVX512_FLAGS | {"avx512_vnni", "avx512_bf16"}
    assert isa_level(both) == "avx512_vnni_bf16" and required_flags("avx512_vnni_bf16") == both
    assert isa_level(AVX2_CPU - {"fma"}) is None
    assert required_flags("avx2") <= required_flags("avx512") <= required_flags("avx512_vnni")
    assert "avx512_vnni" not in required_flags("avx512_bf16")
