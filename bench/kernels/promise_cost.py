"""What the per-model promise adds to loading a model: its bitwise check, timed two ways.

**From the outside** (what a user sees): fresh processes that load FILE and score one token (the
first pass of any generation, which reads every weight), in pairs whose order alternates from
round to round: one in an empty cache root sharing the user's kernels (``bench.lib.scratch_cache``:
the model is checked while it loads), one where the promise is cached. The difference of the
median seconds is what the check adds to a first load; the cached promise costs nothing
measurable there.

**In process** (where it goes): the model loaded without the check and its first pass taken, then
:func:`~spec_decode.backends.llamacpp.promise.exact_rows` called twice in a fresh cache root (the
first call claims, checks and caches; the second reads the cache), and the check alone repeated
``--repeats`` times. Without the first pass before it, the check would also pay for reading the
weights into the process, which the first generation pays when the promise is cached.

    python bench/kernels/promise_cost.py FILE   # prints JSON
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.scratch_cache import scratch_cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--repeats", type=int, default=2, help="checks timed after the first")
    parser.add_argument("--rounds", type=int, default=5, help="pairs of fresh processes")
    parser.add_argument("--one-load", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_load:
        print(json.dumps({"seconds": load_and_first_pass(args.model)}))
        return
    from_outside = outside(args.model, args.rounds)  # before in_process points the cache away
    print(json.dumps({**in_process(args.model, args.repeats), **from_outside}))


def load_and_first_pass(model_path: str) -> float:
    """Seconds to load the model (checked unless its promise is cached) and score one token."""
    started = time.perf_counter()
    from spec_decode.backends.llamacpp.model import LlamaCppModel

    LlamaCppModel(model_path).probe([42], 0)
    return time.perf_counter() - started


def outside(model_path: str, rounds: int) -> dict:
    """Fresh processes loading the model, checking it and cached, in alternating order."""
    cached_root = scratch_cache("promise-cost-cached-")

    def one(root: Path) -> float:
        env = {**os.environ, "SPEC_DECODE_CACHE": str(root)}
        command = [sys.executable, __file__, model_path, "--one-load"]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]

    def checking() -> float:
        root = scratch_cache("promise-cost-")
        try:
            return one(root)
        finally:
            shutil.rmtree(root)

    one(cached_root)  # caches the promise
    times: dict[str, list[float]] = {"checking": [], "cached": []}
    for index in range(rounds):
        order = ("checking", "cached") if index % 2 == 0 else ("cached", "checking")
        for kind in order:
            seconds = checking() if kind == "checking" else one(cached_root)
            times[kind].append(round(seconds, 3))
    shutil.rmtree(cached_root)
    added = statistics.median(times["checking"]) - statistics.median(times["cached"])
    return {"first_load_seconds": times, "check_adds_seconds": round(added, 3)}


def in_process(model_path: str, repeats: int) -> dict:
    """The check's own seconds after the model's first pass, the cached promise's, repeats."""
    os.environ["SPEC_DECODE_CACHE"] = str(scratch_cache("promise-cost-"))

    from spec_decode.backends.llamacpp import promise
    from spec_decode.backends.llamacpp.isa import cpu_flags
    from spec_decode.backends.llamacpp.model import LlamaCppModel

    model = LlamaCppModel(model_path, check_rows=False)
    started = time.perf_counter()
    model.probe([42], 0)
    first_pass = time.perf_counter() - started

    def promise_now() -> tuple[promise.ExactRows, float]:
        started = time.perf_counter()
        made = promise.exact_rows(model.path, model.probe, model.vocab_size, model.context_window)
        return made, time.perf_counter() - started

    def check_again(claim: int, ladder: tuple[int, ...]) -> float:
        started = time.perf_counter()
        promise.checked_block_size(model.probe, claim, model.vocab_size, ladder)
        return time.perf_counter() - started

    checked, first = promise_now()
    cached, cached_seconds = promise_now()
    assert cached == checked, "the cached promise is not the one checked"
    claim = promise.claimed_block_size(
        checked.weight_types, checked.build_size, patched=promise.patched_exact_rows() > 0
    )
    ladder = promise.check_ladder(checked.weight_types, cpu_flags())
    again = [check_again(claim, ladder) for _ in range(repeats)]
    return {
        "promise": checked.report(),
        "first_pass_seconds": round(first_pass, 3),
        "check_seconds": round(first, 3),
        "check_seconds_again": [round(s, 3) for s in again],
        "cached_ms": round(cached_seconds * 1000, 2),
    }


if __name__ == "__main__":
    main()
