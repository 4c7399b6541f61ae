"""The user cache: where assembled models and calibrations live, and how files there are written.

Everything spec-decode keeps between runs lives under one root, ``$SPEC_DECODE_CACHE`` or the
platform's user cache directory: ``models/`` (assembled GGUFs, converted transformers folders) and
``calibration/`` (measured cost curves) side by side. A long-running process reads these files
again and again, so a half-written one must never be seen: every file is written under a unique
temporary name in the same folder, flushed to disk, then renamed over the final name
(:func:`atomic_file`), and work that two processes could do at once (assembling a model) is
serialized by an advisory lock (:func:`file_lock`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

CACHE_ENV = "SPEC_DECODE_CACHE"


def cache_root() -> Path:
    """The cache root: ``$SPEC_DECODE_CACHE`` or the platform's user cache dir for spec-decode."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    import platformdirs

    return platformdirs.user_cache_path("spec-decode")


def models_root() -> Path:
    """Where assembled and converted models live."""
    return cache_root() / "models"


def calibration_root() -> Path:
    """Where measured cost curves live."""
    return cache_root() / "calibration"


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """Write ``path`` all at once: yields a binary file under a unique temporary name beside it,
    then fsyncs it and renames it over ``path`` (readers see the old file or the new one, never
    a part). On an exception the temporary file is removed and ``path`` is left as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # what open() would give, not mkstemp's 0600
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_folder(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically (see :func:`atomic_file`)."""
    with atomic_file(path) as out:
        out.write(text.encode())


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``path`` (created if missing) while the block runs;
    another process (or another open in this one) waits. The lock ends with the process too."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (best effort: some file systems refuse)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
