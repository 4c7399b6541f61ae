"""Two requests as two sequences in one ``llama_decode`` call against queueing them.

Two prompts are read into sequences 0 and 1 of one llama.cpp context; then, for ``STEPS``
rounds, each sequence's next greedy token is fed either in two one-token calls (queued) or in
one call of two rows (batched). It prints the median seconds per round of each, and whether every
batched row is bitwise the queued one (rows of several sequences in one call must be, for the
output to stay what target-only decoding gives). Uses the backend's batch internals directly.

    python bench/kernels/two_sequences.py [STEPS]
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from spec_decode.backends.llamacpp import LlamaCppModel, load_tokenizer
from spec_decode.backends.loading import resolve_gguf

PROMPTS = [
    "Write a Python function that checks whether a number is prime.",
    "Explain the difference between a list and a tuple in Python, with examples.",
]


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 24
    model = LlamaCppModel(
        resolve_gguf("qwen2.5-coder-1.5b"), n_threads=2, n_ctx=1024, max_tree_leaves=2
    )
    tokenizer = load_tokenizer(model)
    prompts = [tokenizer.encode(p) for p in PROMPTS]

    def run(batched: bool) -> tuple[list[list[np.ndarray]], list[float]]:
        model.reset()
        last = []
        for seq, prompt in enumerate(prompts):
            for i, token in enumerate(prompt):
                model._put(i, token, i, (seq,), i == len(prompt) - 1)
            model._decode(len(prompt), time.perf_counter())
            last.append(int(model._read_rows(1)[0].argmax()))
        positions = [len(p) for p in prompts]
        rows: list[list[np.ndarray]] = [[], []]
        seconds = []
        for _ in range(steps):
            start = time.perf_counter()
            if batched:
                for seq in (0, 1):
                    model._put(seq, last[seq], positions[seq], (seq,), True)
                model._decode(2, time.perf_counter())
                got = list(model._read_rows(2))
            else:
                got = []
                for seq in (0, 1):
                    model._put(0, last[seq], positions[seq], (seq,), True)
                    model._decode(1, time.perf_counter())
                    got.append(model._read_rows(1)[0])
            seconds.append(time.perf_counter() - start)
            for seq in (0, 1):
                rows[seq].append(got[seq].copy())
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
