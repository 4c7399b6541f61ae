"""Fixtures of the backend tests."""

from __future__ import annotations

import importlib.util

import pytest
from calibration_toys import CLOCK, CountingModel

from spec_decode.backends import calibration
from spec_decode.backends.llamacpp import kernels


@pytest.fixture
def model(tmp_path, monkeypatch):
    """A toy model on the simulated clock, with a cache of its own."""
    monkeypatch.setenv("SPEC_DECODE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(calibration, "_clock", CLOCK)
    if importlib.util.find_spec("llama_cpp") is None:  # [dev] alone: no llama.cpp build to name
        monkeypatch.setattr(kernels, "build_identity", lambda: "no llama.cpp (a test's toy)")
    weights = tmp_path / "model.gguf"
    weights.write_bytes(b"0123")
    return CountingModel(weights)
