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
the platform's, beside the models), one file per model, keyed by backend, model path and
size on disk, thread count, device and weight formats, so a different build, machine setting or
model file is measured afresh; ``recalibrate`` measures again regardless.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from pathlib import Path
from typing import Any

from spec_decode.backends.cache import calibration_root
from spec_decode.core.models import Model, score
from spec_decode.drafting.costs import CostCurve

#: Block lengths 1..MAX_BLOCK are measured by default (a pass over 17 tokens: k = 16).
MAX_BLOCK = 17
#: The committed context the timed passes extend (long enough to look like a real prompt).
CONTEXT = 64
_FORMAT = 2  # 2: the key names the weight formats


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
    """What a loaded model's timings depend on (see :func:`identity`).

    Reads ``path``/``n_threads`` (llama.cpp) or the wrapped transformers model's
    ``name_or_path``, linear-layer formats and torch's thread count; ``device`` defaults to
    "cpu".
    """
    path = getattr(model, "path", None)
    threads = getattr(model, "n_threads", None)
    weights = None
    module = getattr(model, "model", None)
    if backend == "transformers" and module is not None:
        import torch

        path = getattr(module, "name_or_path", None)
        threads = torch.get_num_threads()
        formats = {getattr(m, "weight_format", None) for m in module.modules()} - {None}
        weights = ",".join(sorted(formats)) or str(getattr(module, "dtype", ""))
    location = Path(path) if path else None
    name = None if location else type(model).__name__
    return identity(backend, location, threads, str(getattr(model, "device", "cpu")), weights, name)


def identity(
    backend: str,
    location: Path | None,
    threads: int | None,
    device: str = "cpu",
    weights: str | None = None,
    name: str | None = None,
) -> dict[str, object]:
    """The calibration key: backend, model file or folder and its size on disk, threads, device
    and weight formats (``name`` stands for the location of a model that has none). Computed
    before loading too, to decide whether a draft model is worth loading at all."""
    location = location.expanduser().resolve() if location else None
    return {
        "backend": backend,
        "model": str(location) if location else name,
        "bytes": _size_on_disk(location) if location else None,
        "threads": threads,
        "device": device,
        "weights": weights,
    }


def cached_seconds(key: dict[str, object], max_block: int = 1) -> list[float] | None:
    """The cached pass times for n = 1..``max_block`` of the model with this key, or None."""
    file = calibration_file(key)
    if not file.is_file():
        return None
    try:
        stored = json.loads(file.read_text())
        if stored.get("format") == _FORMAT and stored.get("identity") == key:
            seconds = [float(s) for s in stored["seconds"]]
            if len(seconds) >= max_block:
                return seconds[:max_block]
    except (ValueError, KeyError, TypeError):
        pass  # an unreadable entry is measured again and overwritten
    return None


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
    key = model_identity(backend, model)
    cached = None if recalibrate else cached_seconds(key, max_block)
    if cached is not None:
        return cached, True
    seconds = measure_passes(model, max_block, repetitions)
    file = calibration_file(key)
    file.parent.mkdir(parents=True, exist_ok=True)
    entry = {"format": _FORMAT, "identity": key, "seconds": seconds, "measured": time.time()}
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


def calibration_file(key: dict[str, object]) -> Path:
    """Where the calibration of the model with this key is cached."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return calibration_root() / f"{digest}.json"


def _size_on_disk(location: Path) -> int | None:
    if location.is_file():
        return location.stat().st_size
    if location.is_dir():
        return sum(f.stat().st_size for f in location.rglob("*") if f.is_file())
    return None
