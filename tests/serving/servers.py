"""``spec-decode serve`` as a subprocess, for the tests that need a real server."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import openai
import pytest

MODEL = "target"  # the served name: the target file's stem
STARTUP_S = 120  # loading, and calibrating the tiny pair the first time


class Server:
    """A ``spec-decode serve`` subprocess on a free port; stderr is collected as it comes."""

    def __init__(self, pair: tuple[Path, Path], *options: str, env: dict[str, str] | None = None):
        target, draft = pair
        command = [sys.executable, "-m", "spec_decode.cli.app", "serve", "--port", "0"]
        command += ["--target", str(target), "--draft", str(draft), "--threads", "1", *options]
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.url = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self.ready.wait(STARTUP_S) or not self.url:
            self.process.kill()
            pytest.fail("the server did not start:\n" + "".join(self.lines))

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            found = re.search(r"on (http://127\.0\.0\.1:\d+)/v1", line)
            if found:
                self.url = found.group(1)
                self.ready.set()
        self.ready.set()

    def client(self, api_key: str = "none") -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=api_key, max_retries=0)

    def stop(self) -> int:
        """SIGTERM, then the exit status (once stderr is read to its end: :attr:`lines` holds
        all the server wrote)."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return -1
        finally:
            self._reader.join(10)
