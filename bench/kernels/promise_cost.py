"""What the per-model promise adds to loading a model: its bitwise check, timed in process.

Loads FILE once without the check, then calls :func:`~spec_decode.backends.llamacpp.promise.
exact_rows` twice in a fresh cache root that shares the user's kernels
(``bench.lib.scratch_cache``): the first call claims, checks the model and caches the result;
the second reads the cache. The check alone (``checked_block_size`` on the same claim) is timed
``--repeats`` more times.

The first call's seconds are what a model's first load costs more than a load whose promise is
cached. (The first calls after a load also warm the threads and caches, which a first
generation would otherwise pay; the repeats show the check warm.) Timing in process leaves out
what two runs of a command would also differ by: the file read from disk, then from the page
cache.

    python bench/kernels/promise_cost.py FILE   # prints JSON
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.scratch_cache import scratch_cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--repeats", type=int, default=2, help="checks timed after the first")
    args = parser.parse_args()
    os.environ["SPEC_DECODE_CACHE"] = str(scratch_cache("promise-cost-"))

    from spec_decode.backends.llamacpp import promise
    from spec_decode.backends.llamacpp.model import LlamaCppModel

    model = LlamaCppModel(args.model, check_rows=False)

    def promise_now() -> tuple[promise.ExactRows, float]:
        started = time.perf_counter()
        made = promise.exact_rows(model.path, model.probe, model.vocab_size, model.context_window)
        return made, time.perf_counter() - started

    def check_again(claim: int) -> float:
        started = time.perf_counter()
        promise.checked_block_size(model.probe, claim, model.vocab_size)
        return time.perf_counter() - started

    checked, first = promise_now()
    cached, cached_seconds = promise_now()
    assert cached == checked, "the cached promise is not the one checked"
    claim = promise.claimed_block_size(
        checked.weight_types, checked.build_size, patched=promise.patched_exact_rows() > 0
    )
    again = [check_again(claim) for _ in range(args.repeats)]
    print(json.dumps({
        "promise": checked.report(),
        "check_seconds": round(first, 3),
        "check_seconds_again": [round(s, 3) for s in again],
        "cached_ms": round(cached_seconds * 1000, 2),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
