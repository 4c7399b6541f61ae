"""The calibration cache on disk: what a curve is keyed by, where it lives, and reading an entry
strictly (every way a file can be malformed named, so the caller measures again).

One JSON file per model under ``$SPEC_DECODE_CACHE/calibration`` (or the platform's user cache),
named by a digest of its key: backend, model path and size on disk, thread count, device, weight
formats and, for llama.cpp, the libraries loaded. Pure persistence: measuring and deciding when
a curve is stale is :mod:`spec_decode.backends.calibration`'s.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path
from typing import Any

from spec_decode.backends.cache import atomic_write_text, calibration_root

#: The entry format (2: the key names the weight formats).
FORMAT = 2

_JSON_TYPES = {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}
_JSON_TYPES[type(None)] = "null"


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
    """The calibration key: backend, model file or folder and its size on disk, threads, device,
    weight formats and, for llama.cpp, the libraries loaded (``name`` stands for the location of a
    model that has none). Computed
    before loading too, to decide whether a draft model is worth loading at all."""
    location = location.expanduser().resolve() if location else None
    key: dict[str, object] = {
        "backend": backend,
        "model": str(location) if location else name,
        "bytes": _size_on_disk(location) if location else None,
        "threads": threads,
        "device": device,
        "weights": weights,
    }
    if backend == "llama.cpp":  # the stock and the exact-rows builds are calibrated apart
        from spec_decode.backends.llamacpp.kernels import build_identity

        key["build"] = build_identity()
    return key


def calibration_file(key: dict[str, object]) -> Path:
    """Where the calibration of the model with this key is cached."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return calibration_root() / f"{digest}.json"


def write_entry(file: Path, entry: dict[str, Any]) -> None:
    """Store ``entry`` in ``file`` atomically (no reader sees half of it), replacing a directory
    found in its place; an ``OSError`` when the disk refuses."""
    if file.is_dir() and not file.is_symlink():
        shutil.rmtree(file)
    atomic_write_text(file, json.dumps(entry, indent=1))


def read_entry(
    file: Path, key: dict[str, object]
) -> tuple[tuple[int, ...], list[float]] | str | None:
    """The valid block sizes and pass times in ``file`` for ``key``, None when there is no file,
    or what is wrong with it (a phrase that follows the file's name)."""
    if not file.exists():
        return None
    if not file.is_file():
        return "is a directory, not a file" if file.is_dir() else "is not a regular file"
    try:
        stored = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return f"is unreadable ({error})"
    if not isinstance(stored, dict):
        return f"holds a JSON {_JSON_TYPES.get(type(stored), 'value')}, not an object"
    missing = [k for k in ("format", "identity", "seconds") if k not in stored]
    if missing:
        return f"lacks {', '.join(missing)}"
    if stored["format"] != FORMAT:
        return f"has format {stored['format']!r}, not {FORMAT}"
    if stored["identity"] != key:
        return "is for another model or setting"
    seconds = stored["seconds"]
    if not isinstance(seconds, list) or not seconds:
        return "has no list of pass times"
    if not all(
        isinstance(s, int | float) and not isinstance(s, bool) and math.isfinite(s) and s > 0
        for s in seconds
    ):
        return f"has pass times that are not finite and > 0: {seconds[:4]}"
    sizes = stored.get("sizes", list(range(1, len(seconds) + 1)))  # once every size 1..n
    if (
        not isinstance(sizes, list)
        or len(sizes) != len(seconds)
        or not all(isinstance(n, int) and not isinstance(n, bool) for n in sizes)
        or sizes != sorted(set(sizes))
        or sizes[0] != 1
    ):
        return "has no increasing list of block sizes, one per pass time"
    return tuple(sizes), [float(s) for s in seconds]


def _size_on_disk(location: Path) -> int | None:
    if location.is_file():
        return location.stat().st_size
    if location.is_dir():
        return sum(f.stat().st_size for f in location.rglob("*") if f.is_file())
    return None
