"""The CPU cores this process may run on: the llama.cpp model's default thread count and the
most threads the CLI accepts."""

from __future__ import annotations

import os


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers and taskset set),
    not the machine's count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
