"""Every built-in engine audited end to end (``spec-decode audit-engine``), one table.

Runs :func:`spec_decode.certify.engine_audit.audit_engine` on each engine of
:data:`spec_decode.certify.engines.ENGINES` (the toy pair's ours, zoo and control; transformers'
own generation on tiny Qwen2 models) at temperature 0.7, top-k 3, 3 tokens, and writes
``bench/results/engine_audits.json`` and ``.md``.

    python bench/exactness/engine_audits.py --samples 20000 --hf-samples 5000
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.audit_rows import HEADER, verdict_cells
from bench.lib.machine import machine
from bench.lib.results import write_results
from spec_decode.certify.engine_audit import audit_engine
from spec_decode.certify.engines import ENGINES
from spec_decode.core.sampling import SamplingParams


def markdown(results: dict[str, object]) -> str:
    rows = [f"| engine | {HEADER} | seconds |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in results["engines"].items():
        rows.append(f"| `{name}` | {verdict_cells(r)} | {r['seconds']:.0f} |")
    return "\n".join(rows) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=20_000, help="for the toy engines")
    ap.add_argument("--hf-samples", type=int, default=5_000, help="for transformers' engines")
    ap.add_argument("--tokens", type=int, default=3)
    args = ap.parse_args()
    sampling = SamplingParams(0.7, top_k=3)
    engines = {}
    for name, make in ENGINES.items():
        if name.startswith(("llama-server:", "vllm:")):  # real engines: real_engine_audits.py
            continue
        engine = make()
        samples = args.hf_samples if name.startswith("hf:") else args.samples
        report = audit_engine(engine, tokens=args.tokens, samples=samples, sampling=sampling)
        engines[name] = dataclasses.asdict(report) | {"version": getattr(engine, "version", None)}
        print(name, report.verdict, f"{report.seconds:.0f} s")
    results = {
        "machine": machine(),
        "sampling": {"temperature": 0.7, "top_k": 3},
        "tokens": args.tokens,
        "engines": engines,
    }
    write_results("engine_audits", results, markdown)


if __name__ == "__main__":
    main()
