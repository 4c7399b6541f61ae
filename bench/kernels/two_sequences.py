"""Two requests as two sequences in one ``llama_decode`` call against queueing them.

Two prompts are read into sequences 0 and 1 of one llama.cpp context; then, for ``STEPS``
rounds, each sequence's next greedy token is fed either in two one-token calls (queued) or in
one call of two rows (batched). It prints the median seconds per round of each, and whether every
batched row is bitwise the queued one (rows of several sequences in one call must be, for the
output to stay what target-only decoding gives). Each sequence has cells of its own, as the
server's slots do (:mod:`spec_decode.backends.llamacpp.slots`).

    python bench/kernels/two_sequences.py [STEPS]
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from spec_decode.backends.llamacpp import load_tokenizer
from spec_decode.backends.llamacpp.context import LlamaContext, Row
from spec_decode.backends.llamacpp.slots import open_slots
from spec_decode.backends.loading import resolve_gguf

PROMPTS = [
    "Write a Python function that checks whether a number is prime.",
    "Explain the difference between a list and a tuple in Python, with examples.",
]


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 24
    models, _ = open_slots(resolve_gguf("qwen2.5-coder-1.5b"), 2, n_threads=2, n_ctx=1024)
    context: LlamaContext = models[0]._context
    tokenizer = load_tokenizer(models[0])
    prompts = [tokenizer.encode(p) for p in PROMPTS]

    def run(batched: bool) -> tuple[list[list[np.ndarray]], list[float]]:
        for seq in (0, 1):
            context.forget(seq)
        last = []
        for seq, prompt in enumerate(prompts):
            rows = [Row(t, i, (seq,), i == len(prompt) - 1) for i, t in enumerate(prompt)]
            last.append(int(context.decode(rows)[0].argmax()))
        positions = [len(p) for p in prompts]
        rows: list[list[np.ndarray]] = [[], []]
        seconds = []
        for _ in range(steps):
            start = time.perf_counter()
            fed = [Row(last[seq], positions[seq], (seq,), True) for seq in (0, 1)]
            if batched:
                got = list(context.decode(fed).copy())
            else:
                got = [context.decode([row])[0].copy() for row in fed]
            seconds.append(time.perf_counter() - start)
            for seq in (0, 1):
                rows[seq].append(got[seq])
                last[seq], positions[seq] = int(got[seq].argmax()), positions[seq] + 1
        return rows, seconds

    medians: dict[bool, list[float]] = {False: [], True: []}
    rows = {}
    for _ in range(2):
        for batched in (False, True):
            rows[batched], seconds = run(batched)
            medians[batched].append(statistics.median(seconds))
    queued, batched = (statistics.median(medians[b]) for b in (False, True))
    same = all(
        np.array_equal(a, b)
        for seq in (0, 1)
        for a, b in zip(rows[False][seq], rows[True][seq], strict=True)
    )
    print(
        f"queued {queued * 1e3:.1f} ms per round of 2 tokens, batched {batched * 1e3:.1f} ms "
        f"({batched / queued:.3f}x); batched rows bitwise equal to queued: {same}"
    )


if __name__ == "__main__":
    main()
