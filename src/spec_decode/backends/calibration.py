"""Calibration: this machine's cost of a target pass by block length, measured on the loaded
backend, and cached.

The auto policy (:mod:`spec_decode.drafting.auto`) decides from a
:class:`~spec_decode.drafting.costs.CostCurve`, and the curve differs by machine more than by
anything else: on 2 CPU cores a 17-token pass costs 7.5 one-token passes, on a GPU about one. So
the curve is measured where it is used, the way it is used: on a warm cache, each call scores the
last committed token plus n - 1 new ones (exactly a verification pass), for n = 1 .. ``max_block``,
sizes interleaved over ``repetitions`` rounds, median per size. A draft token costs one one-token
pass of the draft model. About 3 s for the 1.5B target on this CPU, under a second for the draft.

Results are cached as JSON under the user cache directory (``$SPEC_DECODE_CACHE/calibration`` or
the platform's, next to the prepared models), one file per model, keyed by backend, model path and
size on disk, thread count and device, so a different build, machine setting or model file is
measured afresh; ``recalibrate`` measures again regardless.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from pathlib import Path
from typing import Any

from spec_decode.backends.packaged import cache_root
from spec_decode.core.models import Model, score
from spec_decode.drafting.costs import CostCurve

#: Block lengths 1..MAX_BLOCK are measured by default (a pass over 17 tokens: k = 16).
MAX_BLOCK = 17
#: The committed context the timed passes extend (long enough to look like a real prompt).
CONTEXT = 64
_FORMAT = 1


def measure_passes(model: Model, max_block: int = MAX_BLOCK, repetitions: int = 3) -> list[float]:
    """Median seconds of a pass scoring n tokens on a warm cache, for n = 1..``max_block``.

    The model's cache (if it has ``reset``) is cleared first and filled with a fixed context
    of :data:`CONTEXT` token ids (fewer if the context window is short), untimed.
    """
    if max_block < 1 or repetitions < 1:
        raise ValueError(
            f"need max_block >= 1 and repetitions >= 1, got {max_block}, {repetitions}"
        )
    context = min(CONTEXT, getattr(model, "context_window", CONTEXT + max_block) - max_block)
    if context < 1:
        raise ValueError(
            f"the model's context window is too small to time {max_block}-token passes"
        )
    ids = [(17 + 31 * i) % model.vocab_size for i in range(context + max_block)]
    prefix, extra = ids[:context], ids[context:]
    reset = getattr(model, "reset", None)
    if reset is not None:
        reset()
    score(model, prefix, [])  # untimed: reads the context into the cache, pages weights in
    times: list[list[float]] = [[] for _ in range(max_block)]
    for _ in range(repetitions):
        for n in range(1, max_block + 1):
            start = time.perf_counter()
            score(model, prefix, extra[: n - 1])
            times[n - 1].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def model_identity(backend: str, model: Any) -> dict[str, object]:
    """What a model's timings depend on: backend, file or folder and its size, threads, device.

    Reads ``path``/``n_threads`` (llama.cpp) or the wrapped transformers model's
    ``name_or_path`` and torch's thread count; ``device`` defaults to "cpu".
    """
    path = getattr(model, "path", None)
    if path is None and hasattr(model, "model"):
        path = getattr(model.model, "name_or_path", None)
    threads = getattr(model, "n_threads", None)
    if threads is None and backend == "transformers":
        import torch

        threads = torch.get_num_threads()
    location = Path(path).expanduser().resolve() if path else None
    return {
        "backend": backend,
        "model": str(location) if location else type(model).__name__,
        "bytes": _size_on_disk(location) if location else None,
        "threads": threads,
        "device": str(getattr(model, "device", "cpu")),
    }


def pass_seconds(
    backend: str,
    model: Any,
    *,
    max_block: int = MAX_BLOCK,
    repetitions: int = 3,
    recalibrate: bool = False,
) -> tuple[list[float], bool]:
    """The model's pass times for n = 1..``max_block`` and whether they came from the cache.

    Measures (:func:`measure_passes`) unless a cached entry with at least ``max_block`` sizes
    exists for :func:`model_identity` and ``recalibrate`` is False; stores what it measures.
    """
    identity = model_identity(backend, model)
    file = calibration_file(identity)
    if not recalibrate and file.is_file():
        try:
            stored = json.loads(file.read_text())
            if stored.get("format") == _FORMAT and stored.get("identity") == identity:
                seconds = [float(s) for s in stored["seconds"]]
                if len(seconds) >= max_block:
                    return seconds[:max_block], True
        except (ValueError, KeyError, TypeError):
            pass  # an unreadable entry is measured again and overwritten
    seconds = measure_passes(model, max_block, repetitions)
    file.parent.mkdir(parents=True, exist_ok=True)
    entry = {"format": _FORMAT, "identity": identity, "seconds": seconds, "measured": time.time()}
    file.write_text(json.dumps(entry, indent=1))
    return seconds, False


def cost_curve(
    backend: str, target: Any, draft: Any | None = None, *, recalibrate: bool = False
) -> CostCurve:
    """The target's pass curve (1..:data:`MAX_BLOCK`) and the draft's per-token cost, each from
    the cache or measured now."""
    seconds, _ = pass_seconds(backend, target, recalibrate=recalibrate)
    draft_seconds = None
    if draft is not None:
        draft_seconds = pass_seconds(backend, draft, max_block=1, recalibrate=recalibrate)[0][0]
    return CostCurve.from_passes(seconds, draft_seconds)


def calibration_file(identity: dict[str, object]) -> Path:
    """Where the calibration of the model with this identity is cached."""
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]
    return cache_root() / "calibration" / f"{digest}.json"


def _size_on_disk(location: Path) -> int | None:
    if location.is_file():
        return location.stat().st_size
    if location.is_dir():
        return sum(f.stat().st_size for f in location.rglob("*") if f.is_file())
    return None
