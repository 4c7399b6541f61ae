"""Where the benchmarks write (``bench/results``) and how: one canonical result per benchmark,
``STEM.json`` with the machine recorded inside, beside its ``STEM.md``."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"


def write_results(
    stem: str, results: dict[str, object], markdown: Callable[[dict[str, object]], str]
) -> None:
    """Record the load average at the end, then write ``bench/results/STEM.json`` and the
    ``markdown`` of the results to ``STEM.md``."""
    results["machine"]["load_average_end"] = os.getloadavg()
    results["created"] = time.strftime("%Y-%m-%d %H:%M:%S")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(results, indent=2) + "\n")
    text = markdown(results)
    (RESULTS / f"{stem}.md").write_text(text)
    print(text)
