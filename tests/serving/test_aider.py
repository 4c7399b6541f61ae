"""aider-chat (a real coding agent) against ``spec-decode serve`` as a subprocess, asking for an
edit of a file, streamed and not. aider pins its own dependencies, which conflict with this
project's extras, so it gets its own virtual environment, made once under the cache root (the test
skips, saying why, where it cannot be installed). The tiny model is random: what is tested is that
every request aider sends is honoured and its answer reaches aider, finish reason included, not the
edit a model would make (``bench/serving/aider_edit.py`` measures that on the packaged pair)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from conftest import JSON_VOCABULARY, write_pair
from servers import Server

from spec_decode.backends.cache import cache_root

AIDER = "aider-chat==0.86.2"
#: aider's system prompt alone is a few thousand bytes, one token each on the tiny vocabulary.
CONTEXT = 16384

#: Installing aider's venv the first time takes minutes (the install alone may take 900 s).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="session")
def aider() -> Path:
    """The aider executable of its own virtual environment (made on first use)."""
    folder = cache_root() / "test-venvs" / AIDER.replace("==", "-")
    binary = folder / "bin" / "aider"
    if not binary.exists():
        made = subprocess.run(
            f"{sys.executable} -m venv {folder} && {folder}/bin/pip install -q {AIDER}",
            shell=True, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        if made.returncode != 0 or not binary.exists():
            pytest.skip(f"could not install {AIDER}: {(made.stderr or made.stdout)[-400:]}")
    return binary


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pair = write_pair(tmp_path_factory.mktemp("aider-gguf"), JSON_VOCABULARY, 0, CONTEXT)
    running = Server(pair, "--max-tokens", "48")
    yield running
    assert running.stop() == 0, "".join(running.lines)


def requests_by_status(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/metrics") as answer:
        text = answer.read().decode()
    found = re.findall(r'spec_decode_requests_total\{route="([^"]+)",status="(\d+)"\} (\S+)', text)
    return {f"{route} {status}": float(n) for route, status, n in found}


@pytest.mark.parametrize("stream", [False, True])
def test_aider_asks_for_an_edit_and_gets_the_answer(aider, server, tmp_path, stream):
    (tmp_path / "solution.py").write_text("def add(a, b):\n    return a + b\n")
    before = requests_by_status(server.url).get("/v1/chat/completions 200", 0)
    done = subprocess.run(
        [str(aider), "--model", "openai/target", "--openai-api-base", f"{server.url}/v1",
         "--openai-api-key", "none", "--no-git", "--yes-always", "--no-check-update",
         "--no-show-model-warnings", "--no-analytics", "--edit-format", "whole",
         "--stream" if stream else "--no-stream",
         "--message", "Rename add to plus.", "solution.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},  # no download
    )  # fmt: skip
    counts = requests_by_status(server.url)
    assert counts.get("/v1/chat/completions 200", 0) == before + 1, counts  # one answer, to aider
    assert not [k for k in counts if not k.endswith(" 200")], counts  # no request refused
    # the random model never ends its answer: aider read the answer and its finish_reason
    # ("length"), and says so; with a real model it applies the edit (bench/serving/aider_edit.py)
    assert "has hit a token limit" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
