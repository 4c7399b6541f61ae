"""The cold-prompt TTFT benchmark's table (bench/serving/cold_ttft.py) from recorded seconds:
medians per prompt and server, and how often each of ours is no later than llama-server. (Driving
real servers is the benchmark itself; this checks the arithmetic it reports.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cold_ttft(monkeypatch):
    pytest.importorskip("openai")
    monkeypatch.syspath_prepend(str(ROOT))  # bench.lib; sys.path restored after
    path = ROOT / "bench" / "serving" / "cold_ttft.py"
    spec = importlib.util.spec_from_file_location("bench_cold_ttft", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_table_reports_medians_and_how_often_ours_is_no_later(cold_ttft):
    results = {
        "machine": {"cpu": "a CPU", "cores": 2},
        "threads": 2,
        "reps": 3,
        "seconds": {
            "a": {
                "llama-server target-only": [1.0, 1.2, 5.0],
                "ours target-only": [0.9, 1.1, 1.0],
                "ours default": [1.2, 1.2, 1.2],
            },
            "b": {
                "llama-server target-only": [2.0, 2.0, 2.0],
                "ours target-only": [2.2, 2.2, 2.1],
                "ours default": [1.0, 1.9, 2.0],
            },
        },
    }
    table = cold_ttft.markdown(results)
    assert "| a | 1200 | 1000 | 1200 |" in table  # medians: one slow outlier does not count
    assert "| b | 2000 | 2200 | 1900 |" in table
    assert "ours target-only: no later than llama-server target-only on 1 of 2" in table
    assert "ratio median 0.967, worst 1.100" in table
    assert "ours default: no later than llama-server target-only on 2 of 2" in table
