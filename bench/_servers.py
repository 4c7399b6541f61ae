"""A server process on 127.0.0.1 for the benchmarks (llama-server, ``spec-decode serve``):
started, waited for until ``/health`` answers, and stopped."""

from __future__ import annotations

import shlex
import signal
import subprocess
import time
from pathlib import Path

import httpx
import openai


class Server:
    """A server process on 127.0.0.1:``port``, its log in ``log``; ``start`` waits for health."""

    def __init__(self, command: list[str], port: int, log: Path, env: dict[str, str]) -> None:
        self.command, self.port, self.log, self.env = command, port, log, env
        self.process: subprocess.Popen | None = None
        self.base = f"http://127.0.0.1:{port}"

    def start(self, timeout: float = 600.0) -> float:
        """Start the process and wait until ``/health`` answers 200; seconds it took."""
        begin = time.perf_counter()
        with self.log.open("a") as log:
            log.write(f"$ {shlex.join(self.command)}\n")
            log.flush()
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, env=self.env
            )
        while time.perf_counter() - begin < timeout:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited {self.process.returncode}; see {self.log}")
            try:
                if httpx.get(f"{self.base}/health", timeout=2).status_code == 200:
                    return time.perf_counter() - begin
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        raise TimeoutError(f"no /health from {shlex.join(self.command)}; see {self.log}")

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

    def client(self) -> tuple[openai.OpenAI, str]:
        """An OpenAI client for this server and the model id it serves."""
        client = openai.OpenAI(
            base_url=f"{self.base}/v1", api_key="none", timeout=900, max_retries=0
        )
        return client, client.models.list().data[0].id
