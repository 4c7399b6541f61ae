"""Every error a user can cause or meet on the command line is a sentence and exit 2, within
seconds and before anything slow, never a traceback.

Each case runs ``spec-decode`` as a subprocess in a fresh, empty user cache with the kernels
build switched off (``SPEC_DECODE_NO_BUILD=1``: nothing compiles), with a broken environment or
bad arguments. A missing extra is simulated by making its import fail (``sys.modules[name] =
None``, which ``importlib.util.find_spec`` reports as not installed).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

#: Seconds an error may take: about one is the CLI's start; the rest is room for a busy machine.
LIMIT_S = 5.0
ENV_DROPPED = ("LLAMA_CPP_LIB_PATH", "SPEC_DECODE_KERNELS", "SPEC_DECODE_KERNELS_DIR")


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def llama_libraries_missing() -> bool:
    """Whether llama-cpp-python is installed without libraries of its own (as the README
    installs it), so that a fresh cache has no llama.cpp to load."""
    if not installed("llama_cpp"):
        return False
    from spec_decode.backends.llamacpp.library import own_library_folder

    return own_library_folder() is None


needs_llama = pytest.mark.skipif(not installed("llama_cpp"), reason="the [llama] extra")
needs_serve = pytest.mark.skipif(not installed("fastapi"), reason="the [serve] extra")
needs_no_libraries = pytest.mark.skipif(
    not llama_libraries_missing(),
    reason="llama-cpp-python here has libraries of its own"
    if installed("llama_cpp")
    else "the [llama] extra",
)


@pytest.fixture
def fresh(tmp_path):
    """The run's folder: an empty user cache in it, a file that only looks like a GGUF (its
    magic bytes: every check before loading passes) and one that is text."""
    (tmp_path / "fake.gguf").write_bytes(b"GGUF" + bytes(60))
    (tmp_path / "text.gguf").write_text("not a model\n")
    return tmp_path


def cli(folder: Path, *args: str, block: tuple[str, ...] = (), **env: str) -> tuple[int, str]:
    """Run ``spec-decode ARGS`` in ``folder``'s fresh cache; the exit status and everything it
    printed, once it is checked to hold no traceback and to have ended within the limit."""
    code = (
        f"import sys\nfor name in {block!r}:\n    sys.modules[name] = None\n"
        "from spec_decode.cli.app import app\nsys.argv[0] = 'spec-decode'\napp()\n"
    )
    environ = {k: v for k, v in os.environ.items() if k not in ENV_DROPPED}
    environ |= {"SPEC_DECODE_CACHE": str(folder / "cache"), "SPEC_DECODE_NO_BUILD": "1"}
    environ |= {"COLUMNS": "80", **env}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=environ,
        cwd=folder,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    seconds = time.perf_counter() - start
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    assert seconds < LIMIT_S, f"{seconds:.1f} s: {output}"
    return done.returncode, output


def refused(folder: Path, *args: str, says: tuple[str, ...], **options) -> str:
    """Run the command; it must exit 2 with one of the phrases ``says`` in a short message."""
    status, output = cli(folder, *args, **options)
    assert status == 2, output
    flat = " ".join(output.split())
    assert any(phrase in flat for phrase in says), output
    assert len(output.strip().splitlines()) <= 8, output  # a sentence or two, not a report
    return flat


FAKE = ("--target", "fake.gguf", "--draft", "none")


@needs_llama
@needs_no_libraries
@pytest.mark.parametrize(
    "command",
    [("generate", *FAKE, "--prompt", "hi"), ("serve", *FAKE, "--port", "0"), ("calibrate", *FAKE)],
    ids=["generate", "serve", "calibrate"],
)
def test_missing_kernels_with_no_build_say_what_to_run(fresh, command):
    if command[0] == "serve" and not installed("fastapi"):
        pytest.skip("the [serve] extra")
    refused(fresh, *command, says=("spec-decode build-kernels",))
    assert not (fresh / "cache" / "models").exists()  # nothing was assembled or copied


@needs_llama
@needs_no_libraries
def test_stock_kernels_asked_for_but_not_installed(fresh):
    refused(fresh, "generate", *FAKE, "--prompt", "hi", says=("SPEC_DECODE_KERNELS=stock",),
            SPEC_DECODE_KERNELS="stock")  # fmt: skip


def test_a_missing_backend_extra_names_the_install_line(fresh):
    refused(fresh, "generate", "--prompt", "hi", block=("llama_cpp", "torch"),
            says=('pip install -e ".[llama]"',))  # fmt: skip


def test_a_missing_serve_extra_names_the_install_line(fresh):
    refused(fresh, "serve", block=("fastapi",), says=('pip install -e ".[serve]"',))


def test_a_missing_plot_extra_is_found_before_measuring(fresh):
    for command in (("calibrate", *FAKE), ("sweep",)):
        refused(fresh, *command, "--plot", "out.png", block=("matplotlib",),
                says=('pip install -e ".[plot]"',))  # fmt: skip


@pytest.mark.parametrize(
    "command", [("generate", "--prompt", "hi"), ("calibrate",), ("serve",)], ids=lambda c: c[0]
)
def test_a_target_that_does_not_exist_is_refused_before_any_model_is_prepared(fresh, command):
    refused(fresh, *command, "--target", "no-such-model",
            says=("no such file or folder", "[serve] extra"))  # fmt: skip
    assert not (fresh / "cache" / "models").exists()  # the packaged draft was not touched


def test_a_target_that_is_not_a_model_is_refused(fresh):
    refused(fresh, "generate", "--target", "text.gguf", "--prompt", "hi",
            says=("not a GGUF file", "[llama] extra"))  # fmt: skip
    refused(fresh, "generate", "--target", ".", "--backend", "transformers", "--prompt", "hi",
            says=("not a model", "[hf] extra"))  # fmt: skip


@needs_llama
@needs_serve
def test_a_port_in_use_is_refused_before_the_model_loads(fresh):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = str(holder.getsockname()[1])
        refused(fresh, "serve", *FAKE, "--port", port, says=(f"port {port}", "already in use"))
    refused(fresh, "serve", *FAKE, "--host", "999.0.0.1", says=("cannot listen on",))


@pytest.mark.parametrize("command", [("calibrate", *FAKE), ("sweep", "--tokens", "10000")])
def test_an_unwritable_plot_is_refused_before_measuring(fresh, command):
    if not installed("matplotlib"):
        pytest.skip("the [plot] extra (its absence is test_a_missing_plot_extra_...)")
    for plot in ("no/such/folder/out.png", "/proc/out.png", "."):
        refused(fresh, *command, "--plot", plot, says=("cannot write there", "directory", "folder"))


def test_conflicting_and_impossible_options_are_refused(fresh):
    refused(fresh, "generate", "--no-draft", "--draft", "lookup", "--prompt", "hi",
            says=("give one of them",))  # fmt: skip
    refused(fresh, "generate", *FAKE, "--device", "cuda", "--prompt", "hi",
            says=("runs on the CPU",))  # fmt: skip
    refused(fresh, "calibrate", *FAKE[:2], "--draft", "lookup", says=("give a model or none",))


def test_an_unwritable_cache_is_refused(fresh):
    (fresh / "a-file").write_text("")
    refused(fresh, "generate", *FAKE, "--prompt", "hi", says=("not writable",),
            SPEC_DECODE_CACHE=str(fresh / "a-file" / "cache"))  # fmt: skip
