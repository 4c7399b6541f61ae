"""What reading prompts a chunk a call costs beside reading them whole, on the server's slots.

Four requests arrive together, with prompts of the lengths given, and each then generates
``--tokens`` tokens, one row a step. Two schedules feed the same rows to one llama.cpp context of
four sequences (:func:`spec_decode.backends.llamacpp.slots.open_slots`), alternating run by run
so that the machine's drift hits both alike:

- ``whole``: every prompt in one call, then one row of each request a call (llama-server's
  ``-np 4``: it batches every waiting prompt);
- ``batched``: what the server's batcher does (:func:`~spec_decode.backends.llamacpp.slots.
  plan_call`): each call holds the decoding requests' rows and as much of the shortest unread
  prompt as ``--budget`` rows leave, or that prompt whole while nobody decodes.

Both count the same rows; the ratio of their seconds is what the chunking costs in throughput
(it buys the decoding requests' next tokens while a prompt is read).

    python bench/serving/prompt_chunks.py [--prompts 46,121,168,238] [--tokens 64]
        [--budget 64] [--repeats 3] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.lib

from bench.lib.machine import machine
from bench.lib.results import write_results
from spec_decode.backends import assembly, registry
from spec_decode.backends.llamacpp.call_plan import plan_call
from spec_decode.backends.llamacpp.context import LlamaContext, Row
from spec_decode.backends.llamacpp.kernels import MICRO_BATCH
from spec_decode.backends.llamacpp.slots import open_slots

#: A token id inside every packaged vocabulary; what is read does not change what a row costs.
TOKEN = 42


def whole(context: LlamaContext, prompts: list[int], tokens: int, budget: int) -> list[int]:
    """Every prompt in one call, then a row of every request a call; the rows of each call."""
    rows = [
        Row(TOKEN, position, (seq,), position == length - 1)
        for seq, length in enumerate(prompts)
        for position in range(length)
    ]
    calls = [len(rows)]
    context.decode(rows)
    for step in range(1, tokens):
        context.decode([Row(TOKEN, n - 1 + step, (seq,), True) for seq, n in enumerate(prompts)])
        calls.append(len(prompts))
    return calls


def batched(context: LlamaContext, prompts: list[int], tokens: int, budget: int) -> list[int]:
    """The server's batcher's schedule (:func:`~spec_decode.backends.llamacpp.slots.plan_call`,
    every request posting each step): the decoding requests' rows, then the shortest unread
    prompt's next chunk in what ``budget`` leaves, or that prompt whole while nobody decodes;
    the rows of each call."""
    read = [0] * len(prompts)
    emitted = [0] * len(prompts)  # a prompt's last row emits its first token
    calls = []
    while min(emitted) < tokens:
        seqs = [seq for seq, n in enumerate(prompts) if read[seq] < n or emitted[seq] < tokens]
        waiting = [(read[seq] < prompts[seq], prompts[seq] - read[seq] or 1) for seq in seqs]
        rows = []
        for index, take in plan_call(waiting, budget, MICRO_BATCH, all_posted=True):
            seq = seqs[index]
            if read[seq] == prompts[seq]:  # decoding: its next row
                rows.append(Row(TOKEN, prompts[seq] + emitted[seq] - 1, (seq,), True))
                emitted[seq] += 1
                continue
            first, n = read[seq], prompts[seq]
            rows += [Row(TOKEN, p, (seq,), p == n - 1) for p in range(first, first + take)]
            read[seq] += take
            emitted[seq] += read[seq] == n
        rows.sort(key=lambda row: row.seqs)  # as the batcher orders them
        context.decode(rows)
        calls.append(len(rows))
    return calls


SCHEDULES: dict[str, Callable[[LlamaContext, list[int], int, int], list[int]]] = {
    "whole": whole,
    "batched": batched,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", default="46,121,168,238", help="prompt lengths, one a slot")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--budget", type=int, default=64, help="rows a call (the batcher's)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--stem", default="prompt_chunks")
    args = parser.parse_args()
    prompts = [int(n) for n in args.prompts.split(",")]
    target = assembly.gguf_file(registry.DEFAULT_TARGET)
    _, batcher = open_slots(
        target,
        len(prompts),
        n_threads=args.threads,
        n_ctx=max(prompts) + args.tokens + 8,
        check_rows=False,
    )
    context = batcher.context
    seconds: dict[str, list[float]] = {name: [] for name in SCHEDULES}
    rows: dict[str, list[int]] = {}
    for _ in range(args.repeats):
        for name, schedule in SCHEDULES.items():
            for seq in range(len(prompts)):
                context.drop(seq)
            started = time.perf_counter()
            rows[name] = schedule(context, prompts, args.tokens, args.budget)
            seconds[name].append(time.perf_counter() - started)
            print(f"{name}: {seconds[name][-1]:.2f} s", flush=True)
    assert sum(rows["whole"]) == sum(rows["batched"]), "the schedules read different rows"
    medians = {name: statistics.median(s) for name, s in seconds.items()}
    results = {
        "machine": machine(),
        "setup": vars(args) | {"prompts": prompts, "rows": sum(rows["whole"])},
        "calls": {name: len(r) for name, r in rows.items()},
        "seconds": seconds,
        "median_seconds": medians,
        "batched_over_whole": round(medians["batched"] / medians["whole"], 3),
    }
    write_results(args.stem, results, markdown)


def markdown(results: dict) -> str:
    setup, medians = results["setup"], results["median_seconds"]
    return (
        "## Prompts read in chunks against whole (`python bench/serving/prompt_chunks.py`)\n\n"
        f"{results['machine']['cpu']}, prompts {setup['prompts']} then {setup['tokens']} tokens "
        f"each, {setup['rows']} rows in all; medians of {setup['repeats']} runs, alternating.\n\n"
        "| schedule | calls | seconds |\n|---|---|---|\n"
        + "".join(
            f"| {name} | {results['calls'][name]} | {medians[name]:.2f} |\n" for name in medians
        )
        + f"\nBatched ({setup['budget']} rows a call while one decodes) over whole: "
        f"{results['batched_over_whole']:.3f}x.\n"
    )


if __name__ == "__main__":
    main()
