"""A server process on 127.0.0.1 (llama-server, ``spec-decode serve``): started, waited for until
``/health`` answers, asked for JSON, and stopped. Standard library only, so the engine audits and
the benchmarks share it without an extra."""

from __future__ import annotations

import json
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


class LocalServer:
    """A server process on 127.0.0.1:``port``, its output appended to ``log``; :meth:`start`
    waits until ``/health`` answers 200."""

    def __init__(
        self, command: list[str], port: int, log: Path, env: dict[str, str] | None = None
    ) -> None:
        self.command, self.port, self.log, self.env = command, port, log, env
        self.process: subprocess.Popen | None = None
        self.base = f"http://127.0.0.1:{port}"

    def start(self, timeout: float = 600.0) -> float:
        """Start the process and wait for ``/health``; the seconds it took."""
        begin = time.perf_counter()
        with self.log.open("a") as log:
            log.write(f"$ {shlex.join(self.command)}\n")
            log.flush()
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, env=self.env
            )
        while time.perf_counter() - begin < timeout:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"server exited {self.process.returncode}; its log ends: {self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.base}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return time.perf_counter() - begin
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.25)
        self.stop()
        raise TimeoutError(f"no /health from {shlex.join(self.command)}; see {self.log}")

    def log_tail(self, lines: int = 3) -> str:
        """The last ``lines`` lines of the log, joined (what a caller shows when it dies)."""
        return " | ".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def get(self, path: str, timeout: float = 60.0) -> Any:
        """GET ``path``; the JSON answer (``RuntimeError`` on an error status)."""
        return self._json(urllib.request.Request(f"{self.base}{path}"), path, timeout)

    def post(self, path: str, body: dict[str, Any], timeout: float = 600.0) -> Any:
        """POST ``body`` as JSON to ``path``; the JSON answer (``RuntimeError`` on an error
        status, with the server's message)."""
        request = urllib.request.Request(
            f"{self.base}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        return self._json(request, path, timeout)

    @staticmethod
    def _json(request: urllib.request.Request, path: str, timeout: float) -> Any:
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as error:
            raise RuntimeError(f"{path}: {error.code} {error.read()[:400]!r}") from error

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 30 s."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
