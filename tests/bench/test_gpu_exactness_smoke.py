"""bench/exactness/gpu_exactness.py end to end on the CPU with a tiny random pair: the coupled
rule's sequences equal target-only's seed by seed, the standard rule's control runs, the files are
written (the GPU figures in BENCHMARKS.md come from the same script with ``--device cuda``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_coupled_rows_are_identical_per_seed(tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "gx"
    args = ["--device", "cpu", "--weights", "fp32", "--seeds", "2", "--tokens", "6",
            "--vocab", "64", "--layers", "1", "--hidden", "32", "--noise", "0.03",
            "--temperatures", "0.7", "--out", str(out)]  # fmt: skip
    script = BENCH / "exactness" / "gpu_exactness.py"
    subprocess.run([sys.executable, str(script), *args], check=True, capture_output=True,
                   cwd=BENCH, timeout=600)  # fmt: skip
    rows = json.loads(Path(f"{out}.json").read_text())["rows"]
    assert [(r["rule"], r["temperature"]) for r in rows] == [("coupled", 0.7), ("standard", 0.7)]
    assert rows[0]["identical"] == 2
    assert all(r["drafted"] > 0 for r in rows)
    assert "identical to target-only" in Path(f"{out}.md").read_text()
