"""The skip mark of tests that need the exact-rows llama.cpp build (``spec-decode build-kernels``):
it says what needs the build and which build is loaded. Import it after
``pytest.importorskip("llama_cpp")``."""

from __future__ import annotations

import pytest

from spec_decode.backends.llamacpp.kernels import kernels_status, patched_exact_rows


def needs_exact_rows(why: str) -> pytest.MarkDecorator:
    """Skip unless the loaded llama.cpp is the exact-rows build; ``why`` says what needs it."""
    return pytest.mark.skipif(patched_exact_rows() == 0, reason=f"{why} ({kernels_status()})")
