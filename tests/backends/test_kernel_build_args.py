"""What ``spec-decode build-kernels`` asks cmake for: the instruction sets the exact-rows patch
covers (AVX2, and AVX-512 where the CPU has all of it), never a native build nor VNNI, whose
kernels the patch leaves batch-dependent."""

from __future__ import annotations

from spec_decode.backends.llamacpp.build import AVX512_FLAGS, CMAKE_ARGS, cmake_args, cpu_flags

AVX2_CPU = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"})


def test_an_avx2_cpu_gets_the_avx2_kernels_only():
    args = cmake_args(AVX2_CPU)
    assert args == CMAKE_ARGS
    assert "-DGGML_NATIVE=OFF" in args and "-DGGML_AVX2=ON" in args
    assert not any(a.startswith("-DGGML_AVX512=") for a in args)


def test_an_avx512_cpu_gets_the_avx512_kernels_without_vnni():
    args = cmake_args(AVX2_CPU | AVX512_FLAGS | {"avx512_vnni", "avx512_bf16", "avx512vbmi"})
    assert "-DGGML_AVX512=ON" in args
    assert "-DGGML_AVX512_VNNI=OFF" in args and "-DGGML_AVX_VNNI=OFF" in args
    assert not any(a.endswith("VNNI=ON") or a == "-DGGML_NATIVE=ON" for a in args)


def test_a_cpu_missing_one_avx512_subset_stays_on_avx2():
    assert cmake_args(AVX2_CPU | (AVX512_FLAGS - {"avx512bw"})) == CMAKE_ARGS


def test_cpu_flags_reads_this_machine():
    flags = cpu_flags()
    assert isinstance(flags, frozenset) and all(isinstance(f, str) for f in flags)
