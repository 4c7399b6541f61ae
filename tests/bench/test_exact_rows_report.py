"""The exact-rows-by-type table (bench/lib/exact_rows_report.py, drawn by
bench/kernels/exact_rows_by_type.py --render): differing rows per block size, the promise and
its check's cost, identity runs and the kernel cost where measured."""

from __future__ import annotations

import pytest


@pytest.fixture
def report(bench_module):
    return bench_module("bench.lib.exact_rows_report")


def run(same: bool, speedup: float) -> dict:
    return {"identical_tokens": same, "speedup": speedup}


def test_a_row_per_type_and_model_with_what_was_measured(report):
    covered = {
        "weight_types": {"Q5_K": 169, "F32": 141},
        "differing_rows": {"1": [], "8": []},
        "promise": {"size": 64},
        "check_seconds": 2.8,
        "identity": {"edit": {"greedy": run(True, 1.2), "seed 1": run(False, 1.0)}},
    }
    uncovered = {"weight_types": {"IQ2_XXS": 3}, "differing_rows": {"1": [], "8": [0, 1]}}
    results = {"blocks": "1,8", "types": {"Q5_K_M": covered}, "models": {"other": uncovered}}
    costs = {"command": "kernels_compare", "types": {"Q5_K_M": {"ratio_16": 0.985}}}
    table = report.markdown(results, costs)
    assert "| Q5_K_M | F32, Q5_K | 0 / 0 | 64 | 2.8 | 1/2 | 1.10x | 0.98x |" in table
    assert "| other | IQ2_XXS | 0 / 2 | - | - | - | - | - |" in table
    assert "blocks of 1/8 tokens" in table and "(kernels_compare)" in table
