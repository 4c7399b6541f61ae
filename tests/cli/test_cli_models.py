"""``spec-decode models prepare|list|verify`` on a tiny fake packaged model, and the weight
formats refused before anything loads. No model is downloaded or loaded."""

from __future__ import annotations

import hashlib
import os

import pytest
from typer.testing import CliRunner

from spec_decode.backends import assembly, cache, registry
from spec_decode.backends.loading import WEIGHTS, check_weights, load
from spec_decode.cli.app import app

DATA = b"GGUF" + bytes(range(256)) * 20


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.output


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A packaged model "fake" whose single wheel is a small file; the cache is private."""
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    part = tmp_path / "part1.bin"
    part.write_bytes(DATA)
    spec = registry.PreparedSpec(
        "fake", "fake upstream", "fake-part", 1, "0", len(DATA), hashlib.sha256(DATA).hexdigest()
    )
    monkeypatch.setitem(registry.PREPARED, "fake", spec)
    monkeypatch.setattr(assembly, "part_files", lambda _spec: [part])
    return spec


def test_list_prepare_verify_tell_the_truth(fake):
    code, output = invoke("models", "list")
    assert code == 0 and "fake" in output and "not assembled" in output
    code, output = invoke("models", "prepare", "fake", "--backend", "llama.cpp")
    assert code == 0 and "fake: ready for llama.cpp, 5.1 kB" in output
    code, output = invoke("models", "list")
    assert "ready, 5.1 kB" in output and "not converted" in output
    code, output = invoke("models", "verify", "fake")
    assert code == 0 and "fake: GGUF sha256 matches, 5.1 kB" in output

    path = assembly.gguf_path("fake")
    with path.open("r+b") as f:  # same size, bytes in the middle overwritten
        f.seek(1000)
        f.write(b"!" * 100)
    code, output = invoke("models", "list")
    assert "changed since verified (5.1 kB)" in output
    code, output = invoke("models", "verify", "fake")
    assert code == 0 and "did NOT match its sha256: assembled again" in output
    assert path.read_bytes() == DATA
    os.truncate(path, 10)
    code, output = invoke("models", "prepare", "fake", "--backend", "llama.cpp")
    assert code == 0 and "ready for llama.cpp, 5.1 kB" in output and path.read_bytes() == DATA


def test_verify_of_a_model_never_assembled(fake):
    code, output = invoke("models", "verify", "fake")
    assert code == 0 and "fake: not assembled (spec-decode models prepare fake)" in output


@pytest.mark.parametrize("command", ["prepare", "verify"])
def test_an_unknown_name_exits_2(fake, command):
    code, output = invoke("models", command, "nope")
    assert code == 2 and "unknown packaged model 'nope'; known:" in output


def test_wheels_not_installed_exit_2(fake, monkeypatch):
    monkeypatch.setattr(assembly, "part_files", registry.part_files)
    code, output = invoke("models", "prepare", "fake", "--backend", "llama.cpp")
    assert code == 2 and "fake-part1==0 is not installed" in output
    assert "pip install" in output and "Traceback" not in output


def test_wheels_that_make_another_file_exit_2(fake, tmp_path, monkeypatch):
    other = tmp_path / "other.bin"
    other.write_bytes(DATA[:-1] + b"?")
    monkeypatch.setattr(assembly, "part_files", lambda _spec: [other])
    code, output = invoke("models", "prepare", "fake", "--backend", "llama.cpp")
    assert code == 2 and "expected 5124 bytes" in output and "--force-reinstall" in output


# ---- weight formats ----------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["llama.cpp", "transformers"])
def test_an_unknown_weight_format_is_refused_before_loading(backend, tmp_path):
    with pytest.raises(ValueError, match="unknown weight format 'bogus'"):
        load(backend, str(tmp_path / "not-even-there"), weights="bogus")
    check_weights("llama.cpp", "int8")  # the command line's defaults pass on llama.cpp
    with pytest.raises(ValueError, match="for transformers on cuda; choose one of bf16"):
        check_weights("transformers", "int8", "cuda")


@pytest.mark.parametrize("flag", ["--target-weights", "--draft-weights"])
def test_generate_refuses_an_unknown_weight_format_with_exit_2(fake, flag):
    args = ["generate", "--backend", "llama.cpp", "--target", "fake", "--prompt", "x"]
    code, output = invoke(*args, "--draft", "fake", "--policy", "fixed", flag, "bogus")
    assert code == 2 and "unknown weight format 'bogus'" in output
    assert "llama.cpp runs the GGUF's own quantization" in output


@pytest.mark.slow  # imports torch and transformers
def test_the_weight_formats_are_those_the_transformers_backend_takes():
    pytest.importorskip("torch")
    from spec_decode.backends.transformers import weights
    from spec_decode.backends.transformers.cpu_linear import WEIGHT_FORMATS

    assert set(WEIGHTS["cpu"]) == set(WEIGHT_FORMATS)
    assert set(WEIGHTS["cuda"]) == set(weights._CUDA_DTYPES)
