"""The concurrent serving benchmark's arithmetic (bench/lib/concurrent_report.py, driven by
bench/serving/concurrent_users.py): percentiles, aggregate tokens/s, identity with solo answers, and
the table built from recorded runs. (Driving real servers is the benchmark itself; this checks
what it reports.)"""

from __future__ import annotations

import pytest


@pytest.fixture
def report(bench_module):
    return bench_module("bench.lib.concurrent_report")


def test_percentile_is_linear_between_the_closest_ranks(report):
    percentile = report.percentile
    assert percentile([], 95) is None
    assert percentile([3.0], 95) == 3.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == pytest.approx(2.5)  # sorted first
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)  # rank 3.8
    assert percentile([1.0, 2.0], 0) == 1.0
    assert percentile([1.0, 2.0], 100) == 2.0
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def record(name, sampling, text, sent, ended, tokens, ttft):
    return {
        "name": name,
        "sampling": sampling,
        "text": text,
        "sent": sent,
        "ended": ended,
        "completion_tokens": tokens,
        "ttft_s": ttft,
    }


RECORDS = [
    record("a", "greedy", "x", 10.0, 12.0, 20, 0.5),
    record("b", "seeded", "y", 10.0, 14.0, 30, 1.0),
    record("c", "greedy", "z!", 11.0, 15.0, 30, 2.0),
]
SOLO = {"a": "x", "b": "y?", "c": "z"}


def test_identity_counts_each_sampling_apart_and_names_what_differed(report):
    counts = report.identity(RECORDS, SOLO)
    assert counts["greedy"] == {"same": 1, "total": 2, "differing": ["c"]}
    assert counts["seeded"] == {"same": 0, "total": 1, "differing": ["b"]}


def test_a_run_reports_tokens_over_its_whole_wall_time_and_its_first_tokens(report):
    row = report.summarize_run([*RECORDS, record("d", "greedy", "", 10.5, 11.0, 0, None)])
    assert row["wall_s"] == pytest.approx(5.0)  # first sent 10.0, last ended 15.0
    assert row["tokens_per_second"] == pytest.approx(80 / 5.0)
    assert row["ttft_median_s"] == pytest.approx(1.0)
    assert row["ttft_p95_s"] == pytest.approx(1.9)  # rank 1.9 of [0.5, 1.0, 2.0]
    assert row["no_text"] == 1


def test_the_table_has_a_row_per_variant_and_client_count(report):
    probe = {"ttft_s": 0.33, "sent_after_s": 2.0, "longs": 1, "longs_streaming_at_first_token": 1}
    idle = dict(probe, ttft_s=7.9, longs_streaming_at_first_token=0)
    solo = [{"name": n, "text": t} for n, t in SOLO.items()]
    results = {
        "machine": {
            "cpu": "a CPU",
            "cores": 2,
            "load_average_start": [1.0],
            "load_average_end": [2.0],
        },
        "setup": {
            "threads": 2,
            "slots": 4,
            "ctx": 4096,
            "seed": 0,
            "tokens": 64,
            "temperature": 0.7,
            "workloads": {"code-edit": 1, "mtbench": 1, "humaneval": 1},
            "requests": 3,
            "probe_tokens": 128,
            "probe_delay": 1.0,
        },
        "commands": {"ours": "spec-decode serve"},
        "llama_server": "/x/llama-server",
        "solo": {"ours": solo, "theirs": solo},
        "runs": {
            "ours": {
                "1": {"records": RECORDS[:1], "second_user": None},
                "2": {"records": RECORDS, "second_user": probe},
            },
            "theirs": {"2": {"records": RECORDS[:2], "second_user": idle}},
        },
    }
    results["summary"] = report.summarize(results)
    table = report.markdown(results)
    assert "| ours | 1 | 10.0 | 0.50 | 0.50 | - | 1/1 | - |" in table
    assert "| ours | 2 | 16.0 | 1.00 | 1.90 | 0.33 | 1/2 | 0/1 |" in table
    assert "| theirs | 2 | 12.5 | 0.75 | 0.97 | 7.90* | 1/1 | 0/1 |" in table
    assert "- ours, 2 clients, differing: c, b" in table
    assert "llama-server binary: `/x/llama-server`" in table


def test_repeats_give_medians_their_range_and_identity_over_every_answer(report):
    """With ``--repeats``, a variant and client count holds one run a repeat: the summary
    takes the median and range of each figure and counts every repeat's answers."""
    fast = [record("a", "greedy", "x", 0.0, 1.0, 40, 0.2)]  # 40 tok/s
    slow = [record("a", "greedy", "x!", 0.0, 4.0, 40, 0.8)]  # 10 tok/s
    middle = [record("a", "greedy", "x", 0.0, 2.0, 40, 0.4)]  # 20 tok/s
    probes = [{"ttft_s": s, "longs_streaming_at_first_token": 1} for s in (0.9, 0.3, 0.5)]
    runs = [
        {"records": r, "second_user": p} for r, p in zip((fast, slow, middle), probes, strict=True)
    ]
    results = {"solo": {"ours": [{"name": "a", "text": "x"}]}, "runs": {"ours": {"2": runs}}}
    row = report.summarize(results)["ours"]["2"]
    assert row["repeats"] == 3
    assert row["second_user"]["ttft_s"] == pytest.approx(0.5)
    assert row["tokens_per_second"] == pytest.approx(20.0)
    assert row["tokens_per_second_range"] == pytest.approx([10.0, 40.0])
    assert row["ttft_median_s"] == pytest.approx(0.4)
    assert row["second_user"]["ttft_s"] == pytest.approx(0.5)
    assert row["second_user"]["runs_s"] == pytest.approx([0.3, 0.5, 0.9])
    assert row["identity"]["greedy"] == {"same": 2, "total": 3, "differing": ["a"]}
    assert report._rate(row) == "20.0 (10.0-40.0)"


def test_several_probes_a_run_count_as_one_sample(report):
    """With ``--probes``, a run holds a list of probes: the median is over every probe of every
    repeat."""
    probes = [{"ttft_s": s, "longs_streaming_at_first_token": 1} for s in (0.9, 0.3, 0.5, 0.2)]
    records = [record("a", "greedy", "x", 0.0, 1.0, 40, 0.2)]
    runs = [{"records": records, "second_users": chunk} for chunk in (probes[:3], probes[3:])]
    results = {"solo": {"ours": [{"name": "a", "text": "x"}]}, "runs": {"ours": {"2": runs}}}
    second = report.summarize(results)["ours"]["2"]["second_user"]
    assert second["ttft_s"] == pytest.approx(0.4)
    assert second["runs_s"] == [0.2, 0.3, 0.5, 0.9]
