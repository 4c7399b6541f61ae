"""The cases of the transformers-backend benchmarks on the packaged pair: three hand-written
prompts (kept for reproducing them) and two sampling settings."""

from __future__ import annotations

#: The hand-written prompts of the transformers-backend benchmarks (kept for reproducing them).
HANDWRITTEN_PROMPTS = {
    "code completion": (
        "Write a Python module that implements a binary search tree class with insert, delete, "
        "search, in-order traversal and height methods, with docstrings and type hints."
    ),
    "code edit": (
        "Rename the variable `data` to `records` everywhere in this code and return the whole "
        "code, unchanged otherwise:\n\n```python\n"
        "def summarize(data):\n"
        "    total = 0\n"
        "    count = 0\n"
        "    for item in data:\n"
        "        if item is None:\n"
        "            continue\n"
        "        total += item\n"
        "        count += 1\n"
        "    mean = total / count if count else 0.0\n"
        "    largest = max(x for x in data if x is not None)\n"
        "    smallest = min(x for x in data if x is not None)\n"
        "    return {'total': total, 'count': count, 'mean': mean,\n"
        "            'largest': largest, 'smallest': smallest}\n```"
    ),
    "prose": (
        "Write a long, vivid short story about a lighthouse keeper who finds a message in a "
        "bottle during a winter storm."
    ),
}
#: Sampling settings by name: temperature (0 is greedy).
SETTINGS = {"greedy": 0.0, "temperature 0.7": 0.7}
