"""How long a user waits for each error a first hour meets: every case is ``spec-decode`` run
as a new user runs it (the installed command, a fresh empty user cache, kernels not built and
their build switched off), timed from start to exit, median of ``--repeats``; its exit status and
how many lines it printed are recorded, and whether a traceback appeared.

    python bench/first_hour/error_seconds.py
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.machine import machine
from bench.lib.results import write_results

FAKE = ("--target", "fake.gguf", "--draft", "none")


def cases(port: int) -> dict[str, tuple[str, ...]]:
    """The errors, by what the user did."""
    return {
        "generate before build-kernels (--no-build)": ("generate", "--prompt", "hi", "--no-build"),
        "a target that does not exist": ("generate", "--target", "no-such-model", "--prompt", "hi"),
        "a target that is not a model": ("generate", "--target", "text.gguf", "--prompt", "hi"),
        "--no-draft with --draft": ("generate", "--no-draft", "--draft", "lookup", "--prompt", "x"),
        "--max-new-tokens 0": ("generate", *FAKE, "--max-new-tokens", "0", "--prompt", "hi"),
        "serve on a port in use": ("serve", *FAKE, "--port", str(port)),
        "serve --parallel 0": ("serve", *FAKE, "--parallel", "0"),
        "calibrate --plot into /proc": ("calibrate", *FAKE, "--plot", "/proc/x.png"),
        "an unwritable cache": ("generate", *FAKE, "--prompt", "hi"),
    }


def run(folder: Path, args: tuple[str, ...], cache: Path) -> dict:
    """One run of ``spec-decode ARGS`` in ``folder``: seconds, exit status, lines, traceback."""
    environ = {**os.environ, "SPEC_DECODE_CACHE": str(cache), "SPEC_DECODE_NO_BUILD": "1"}
    start = time.perf_counter()
    done = subprocess.run(
        [shutil.which("spec-decode") or "spec-decode", *args], capture_output=True, text=True,
        env=environ, cwd=folder, stdin=subprocess.DEVNULL, timeout=120,
    )  # fmt: skip
    output = done.stdout + done.stderr
    return {
        "seconds": time.perf_counter() - start,
        "exit": done.returncode,
        "lines": len(output.strip().splitlines()),
        "traceback": "Traceback" in output,
        "message": " ".join(output.split())[:240],
    }


def measure(repeats: int) -> dict[str, dict]:
    results = {}
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        for name, args in cases(holder.getsockname()[1]).items():
            runs = []
            for _ in range(repeats):
                folder = Path(tempfile.mkdtemp(prefix="first-hour-"))
                (folder / "fake.gguf").write_bytes(b"GGUF" + bytes(60))
                (folder / "text.gguf").write_text("not a model\n")
                cache = folder / "cache"
                if name == "an unwritable cache":
                    (folder / "a-file").write_text("")
                    cache = folder / "a-file" / "cache"
                runs.append(run(folder, args, cache))
                shutil.rmtree(folder)
            results[name] = {**runs[-1], "seconds": statistics.median(r["seconds"] for r in runs)}
            print(f"{name}: {results[name]['seconds']:.2f} s, exit {results[name]['exit']}")
    return results


def markdown(results: dict) -> str:
    lines = [
        "# Errors a first hour meets: seconds to the message\n",
        f"Machine: {results['machine']['cpu']}, {results['machine']['cores']} cores; median of "
        f"{results['repeats']} runs each, a fresh user cache every run.\n",
        "| what the user did | seconds | exit | lines | traceback | message |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in results["cases"].items():
        lines.append(
            f"| {name} | {r['seconds']:.2f} | {r['exit']} | {r['lines']} | "
            f"{'YES' if r['traceback'] else 'no'} | {r['message'][:120]} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    results = {"repeats": args.repeats, "machine": machine(), "cases": measure(args.repeats)}
    write_results("error_seconds", results, markdown)


if __name__ == "__main__":
    main()
