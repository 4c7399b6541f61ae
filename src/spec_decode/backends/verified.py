"""Files whose content was checked once and is re-checked cheaply before every use.

A marker file records, for each checked file, its sha256 together with what ``stat`` says about it
(size, modification and change times, inode). Any write, truncation, replacement or copy over the
file changes at least one of those, so comparing them costs one ``stat`` and re-hashing is
needed only when they differ: then the content is either still the recorded one
(the marker is renewed) or not (the caller rebuilds the file). A marker that is missing,
unreadable or malformed counts as "nothing verified".
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

from spec_decode.backends.cache import atomic_write_text
from spec_decode.backends.registry import Progress

_FORMAT = 1
_CHUNK = 1 << 22


@dataclass(frozen=True)
class FileRecord:
    """A file's sha256 and the ``stat`` fields that change whenever its content can have."""

    sha256: str
    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int

    @classmethod
    def of(cls, path: Path, sha256: str) -> FileRecord:
        """The record of ``path`` as it is now, with its (already computed) ``sha256``."""
        return cls(sha256, *_stat_key(path.stat()))

    def same_stat(self, path: Path) -> bool:
        """Whether ``path`` is a regular file whose ``stat`` matches this record."""
        try:
            st = path.stat()
        except OSError:
            return False
        return stat.S_ISREG(st.st_mode) and _stat_key(st) == (
            self.size,
            self.mtime_ns,
            self.ctime_ns,
            self.inode,
        )


def sha256_file(path: Path, progress: Progress | None = None, stage: str = "") -> str:
    """The sha256 of the file at ``path``, reporting bytes read to ``progress``."""
    digest = hashlib.sha256()
    total = path.stat().st_size
    done = 0
    with path.open("rb") as src:
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            done += len(chunk)
            if progress:
                progress(stage or f"checking {path.name}", done, total)
    return digest.hexdigest()


def write_marker(marker: Path, records: dict[str, FileRecord]) -> None:
    """Record ``records`` (file name relative to the marker's folder -> record) atomically."""
    files = {name: asdict(record) for name, record in records.items()}
    atomic_write_text(marker, json.dumps({"format": _FORMAT, "files": files}, indent=1))


def read_marker(marker: Path) -> dict[str, FileRecord] | None:
    """The records in ``marker``, or None when it is missing or malformed in any way."""
    try:
        stored = json.loads(marker.read_text())
        files = stored["files"] if stored.get("format") == _FORMAT else None
        if not isinstance(files, dict) or not files:
            return None
        records = {str(name): FileRecord(**fields) for name, fields in files.items()}
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError):
        return None
    for record in records.values():
        numbers = (record.size, record.mtime_ns, record.ctime_ns, record.inode)
        if not isinstance(record.sha256, str) or not all(type(n) is int for n in numbers):
            return None
    return records


def unchanged(marker: Path, expected: dict[str, str] | None = None) -> bool:
    """Whether every file recorded in ``marker`` still has its recorded ``stat`` (one ``stat``
    per file, no hashing) and, with ``expected`` (name -> sha256), the marker records exactly
    those hashes."""
    records = read_marker(marker)
    if records is None or (expected is not None and _hashes(records) != expected):
        return False
    return all(record.same_stat(marker.parent / name) for name, record in records.items())


def recheck(marker: Path, progress: Progress | None = None, everything: bool = False) -> bool:
    """Re-hash every recorded file whose ``stat`` differs (every file with ``everything``).
    True, with the marker renewed, when all still hold their recorded content; False otherwise
    (also for a missing or malformed marker), leaving the marker as it was."""
    records = read_marker(marker)
    if records is None:
        return False
    renewed: dict[str, FileRecord] = {}
    for name, record in records.items():
        path = marker.parent / name
        if not everything and record.same_stat(path):
            renewed[name] = record
        elif not matches(path, record.sha256, record.size, progress):
            return False
        else:
            renewed[name] = FileRecord.of(path, record.sha256)
    if renewed != records:
        write_marker(marker, renewed)
    return True


def matches(path: Path, sha256: str, size: int, progress: Progress | None = None) -> bool:
    """Whether the regular file at ``path`` has ``size`` bytes and this ``sha256``, and was not
    written to while it was being hashed."""
    try:
        before = path.stat()
    except OSError:
        return False
    if not stat.S_ISREG(before.st_mode) or before.st_size != size:
        return False
    if sha256_file(path, progress, f"checking {path.name}") != sha256:
        return False
    return _stat_key(path.stat()) == _stat_key(before)


def _stat_key(st: os.stat_result) -> tuple[int, int, int, int]:
    """What changes when a file's content can have: size, mtime, ctime, inode (not atime)."""
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


def _hashes(records: dict[str, FileRecord]) -> dict[str, str]:
    return {name: record.sha256 for name, record in records.items()}
