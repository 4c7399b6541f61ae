"""The planner replay (bench/speed/planner_replay.py): a broad case's speedup counts its prompt's
reading on both sides, a session's does not, and a replay of collected answers runs end to end
with its bounds in order (hindsight and oracle never behind the planner)."""

from __future__ import annotations

import argparse
import json

import pytest


@pytest.fixture
def replay(bench_module):
    return bench_module("bench.speed.planner_replay")


def test_a_speedup_counts_the_prompt_reading_on_both_sides(replay):
    rows = [
        {"tokens": 10, "prompt_passes": 10.0, "ours": 5.0},
        {"tokens": 10, "prompt_passes": 0.0, "ours": 5.0},
    ]
    assert replay.speedups(rows, "ours") == [pytest.approx(20 / 15), 2.0]


@pytest.mark.parametrize("shared", [True, False])
def test_a_replay_of_collected_answers_reports_its_bounds(
    replay, tmp_path, capsys, monkeypatch, shared
):
    cycle = list(range(20)) * 3
    turns = [
        {
            "set": "edit",
            "case": str(i),
            "turn": 0,
            "prompt": cycle[:40],
            "answer": cycle[40 + i : 56 + i],
        }
        for i in range(3)
    ]
    curve = {"sizes": [1, 2, 9, 17], "seconds": [0.03, 0.045, 0.12, 0.16]}
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps({"curve": curve, "shared_history": shared, "turns": turns}))
    monkeypatch.setattr(replay, "RESULTS", tmp_path)
    args = argparse.Namespace(
        answers=str(answers), k_max=16, vocab=64, verbose=False, stem="replayed", tree=False
    )
    replay.replay(args)
    printed = capsys.readouterr().out
    assert printed.startswith("edit       3 turns:") and "per case, min/p10/median: ours" in printed
    figures = [float(word) for word in printed.split("ours ")[1].split(",")[0].split("/")]
    assert figures[0] > 1.0  # copying the cycle pays on this curve
    rows = json.loads((tmp_path / "replayed.json").read_text())["turns"]
    for row in rows:
        assert row["oracle"] <= row["hindsight"] + 1e-9 <= row["ours"] + 2e-9
        assert (row["prompt_passes"] == 0) == shared  # a session's prompt is cached
