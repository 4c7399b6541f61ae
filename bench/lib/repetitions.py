"""The interleaved repetition loop: every variant of a case run in a seeded shuffled order per
repetition, so that background load hits all variants alike."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from bench.lib.records import RunRecord


def interleaved(
    cases: Sequence[str],
    variants: Callable[[str], list[str]],
    reps: int,
    run: Callable[[str, str, int], RunRecord],
) -> dict[str, dict[str, list[RunRecord]]]:
    """``reps`` repetitions of every case's variants, in a seeded shuffled order per case and
    repetition so background load hits all variants alike: ``raw[case][variant]`` lists the
    records of ``run(case, variant, rep)``."""
    raw: dict[str, dict[str, list[RunRecord]]] = {case: {} for case in cases}
    order = random.Random(0)
    for rep in range(reps):
        for case in cases:
            names = variants(case)
            order.shuffle(names)
            for name in names:
                record = run(case, name, rep)
                raw[case].setdefault(name, []).append(record)
                rate = record["generated"] / record["seconds"]
                print(f"rep {rep} {case} | {name}: {rate:.2f} tok/s", flush=True)
    return raw
