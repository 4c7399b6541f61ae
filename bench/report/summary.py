"""Regenerate the table BENCHMARKS.md opens with from the canonical results
(:mod:`bench.lib.summary`): run it after any benchmark that feeds the table.

    python bench/report/summary.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.summary import render

DOCUMENT = Path(__file__).resolve().parents[2] / "BENCHMARKS.md"


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help; no options
    changed = render(DOCUMENT)
    print(f"{DOCUMENT.name}: {'table updated' if changed else 'table unchanged'}")


if __name__ == "__main__":
    main()
