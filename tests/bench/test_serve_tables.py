"""The serving benchmark's tables (bench/lib/serve_report.py) from recorded runs: medians over
repetitions, counts summed, passes and acceptance, greedy identity against each variant's own
target-only, the markdown and the plot. (Driving real servers is the benchmark itself; this checks
the arithmetic it reports.)"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def serve_bench(monkeypatch, tmp_path):
    pytest.importorskip("openai")
    pytest.importorskip("httpx")
    monkeypatch.syspath_prepend(str(ROOT))  # bench.lib; sys.path restored after
    from bench.lib import serve_client, serve_report

    monkeypatch.setattr(serve_report, "RESULTS", tmp_path)
    return SimpleNamespace(
        round_robin=serve_client.round_robin,
        summarize=serve_report.summarize,
        identity=serve_report.identity,
        markdown=serve_report.markdown,
        plot=serve_report.plot,
    )


def turn(text: str, completion: int, gen_s: float, drafted: int = 0, accepted: int = 0) -> dict:
    return {
        "text": text,
        "seconds": gen_s + 0.5,
        "ttft_s": 0.5,
        "generation_s": gen_s,
        "completion_tokens": completion,
        "drafted": drafted,
        "accepted": accepted,
        "target_passes": completion - accepted,
    }


def session(seconds: float, turns: list[dict]) -> dict:
    return {"seconds": seconds, "load_average": 2.0, "turns": turns}


def results() -> dict:
    base, spec = "llama-server target-only", "llama-server ngram-simple"
    return {
        "machine": {
            "cpu": "test",
            "cores": 2,
            "load_average_start": [1.0],
            "load_average_end": [3.0],
        },
        "threads": 2,
        "tokens": 8,
        "reps": 2,
        "ctx": 4096,
        "references": {base: base, spec: base},
        "commands": {base: "llama-server -m t.gguf", spec: "llama-server --spec-type ngram-simple"},
        "sessions": {"code-edit A": {"category": "code-edit", "turns": 2}},
        "chat_template_same_rendering": {"code-edit A": True},
        "runs": {
            "code-edit A": {
                base: [
                    session(10.0, [turn("a", 11, 1.0), turn("b", 11, 1.0)]),
                    session(12.0, [turn("a", 11, 2.0), turn("b", 11, 2.0)]),
                ],
                spec: [
                    session(5.0, [turn("a", 11, 0.5, 8, 6), turn("b", 11, 0.5, 8, 6)]),
                    session(6.0, [turn("a", 11, 0.5, 8, 6), turn("X", 11, 0.5, 8, 2)]),
                ],
            }
        },
    }


def test_summary_identity_markdown_and_plot(serve_bench, tmp_path):
    data = results()
    data["summary"] = serve_bench.summarize(data)
    data["identity"] = serve_bench.identity(data)
    base = data["summary"]["code-edit"]["llama-server target-only"]
    spec = data["summary"]["code-edit"]["llama-server ngram-simple"]
    assert base["session_seconds"] == 11.0  # median of 10 and 12
    assert base["generation_tokens_per_second"] == pytest.approx((20 / 2 + 20 / 4) / 2)
    assert base["ttft_ms"] == 500
    assert base["tokens_per_pass"] == 1.0 and base["acceptance_rate"] is None
    assert spec["drafted"] == 32 and spec["accepted"] == 20
    assert spec["acceptance_rate"] == pytest.approx(20 / 32)
    assert spec["target_passes_per_rep"] == pytest.approx((44 - 20) / 2)
    assert data["identity"]["llama-server target-only"]["same"] == 4
    ngram = data["identity"]["llama-server ngram-simple"]
    assert (ngram["same"], ngram["total"]) == (3, 4)
    assert ngram["differing"] == ["code-edit A turn 2 rep 1"]
    text = serve_bench.markdown(data)
    assert "| llama-server ngram-simple | 5.5 | 2.00x |" in text
    assert "llama-server ngram-simple (vs llama-server target-only): 3/4" in text
    pytest.importorskip("matplotlib")
    serve_bench.plot(data, "serve")
    assert (tmp_path / "serve.png").stat().st_size > 0


def test_round_robin_alternates_workloads(serve_bench):
    from bench.lib.prompt_sets import Session

    sessions = [Session("code-edit", f"c{i}", ("x",)) for i in range(2)]
    sessions += [Session("mtbench", f"m{i}", ("x",)) for i in range(3)]
    sessions += [Session("humaneval", "h0", ("x",))]
    assert serve_bench.round_robin(sessions) == [
        "code-edit c0", "mtbench m0", "humaneval h0", "code-edit c1", "mtbench m1", "mtbench m2"
    ]  # fmt: skip
