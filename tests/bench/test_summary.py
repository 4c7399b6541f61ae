"""BENCHMARKS.md's opening table comes from the canonical results alone: rendering it twice
changes nothing, every row names its machine, date and command, and a document without the
markers is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def summary(bench_module):
    return bench_module("bench.lib.summary")


def test_the_table_is_rendered_between_the_markers_and_is_stable(tmp_path, summary):
    document = tmp_path / "B.md"
    document.write_text(f"# B\n\n{summary.START}\nold\n{summary.END}\n\nrest\n")
    assert summary.render(document)
    text = document.read_text()
    assert "old" not in text and text.endswith("\n\nrest\n")
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0].startswith("| workload | ours | anchor | ratio")
    assert all(row.count(" | ") == 6 and "`python bench/" in row for row in rows[1:])
    assert not summary.render(document)  # nothing new measured: nothing changes


def test_a_document_without_markers_is_refused(tmp_path, summary):
    document = tmp_path / "B.md"
    document.write_text("# B\n")
    with pytest.raises(ValueError, match="markers"):
        summary.render(document)


def test_benchmarks_md_holds_the_current_table(summary):
    """The committed table is what the committed results render (run bench/report/summary.py
    after a benchmark that feeds it)."""
    document = ROOT / "BENCHMARKS.md"
    assert f"{summary.START}\n{summary.table()}\n{summary.END}" in document.read_text()
