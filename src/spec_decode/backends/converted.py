"""The packaged models converted for the transformers backend, once, into the user cache.

The llama.cpp backend runs the assembled GGUF as shipped (:mod:`spec_decode.backends.assembly`).
transformers cannot: :func:`prepare` dequantizes the verified GGUF with transformers into a plain
safetensors folder (fp16 weights) plus the tokenizer. That takes minutes and much memory, so it
is never done at load time by surprise; it runs into a temporary folder that is renamed into
place when complete, and a marker then records every file's sha256 and ``stat``
(:mod:`spec_decode.backends.verified`). Each use checks the marker (one ``stat`` per file),
re-hashes a file whose ``stat`` changed, and converts again when the content differs.

This module imports neither torch nor transformers at import time, so ``spec-decode models list``
stays fast.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

from spec_decode.backends.assembly import gguf_file
from spec_decode.backends.cache import file_lock, models_root
from spec_decode.backends.registry import PREPARED, Progress, spec_of
from spec_decode.backends.verified import (
    FileRecord,
    recheck,
    sha256_file,
    unchanged,
    write_marker,
)

READY_MARKER = "prepared.ok"

log = logging.getLogger(__name__)


def model_dir(name: str) -> Path:
    """The folder that holds (or will hold) the converted model ``name``."""
    return models_root() / spec_of(name).name


def is_prepared(name: str) -> bool:
    """Whether ``name`` is converted and no file of it changed since (one ``stat`` per file)."""
    return unchanged(model_dir(name) / READY_MARKER)


def disk_usage(path: Path) -> int:
    """Bytes used by the files under ``path`` (0 when it does not exist)."""
    if not path.exists():
        return 0
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantize a GGUF into a transformers folder with fp16 safetensors and the tokenizer.

    transformers refuses ``save_pretrained`` on a GGUF-loaded model, so the weights are moved into
    a fresh model built from the same config (without its ``quantization_config``).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tokenizer.save_pretrained(str(out))
    loaded = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    state = loaded.state_dict()
    del loaded
    with torch.device("meta"):
        fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float16)
    fresh.load_state_dict({k: v.to(torch.float16) for k, v in state.items()}, assign=True)
    del state
    fresh.generation_config.pad_token_id = tokenizer.pad_token_id
    fresh.save_pretrained(str(out))


def prepare(name: str, progress: Progress | None = None) -> Path:
    """The converted folder of ``name``, converting it first when it is missing or any of its
    files no longer holds what was recorded (see the module docstring)."""
    spec = spec_of(name)
    folder = model_dir(name)
    marker = folder / READY_MARKER
    if unchanged(marker):
        return folder
    with file_lock(folder.with_name(f"{spec.name}.lock")):
        if unchanged(marker) or recheck(marker, progress):
            return folder
        if _adopt_old_marker(marker, spec.sha256):
            return folder
        if folder.exists():
            log.warning("%s: %s is incomplete or changed; converting it again", name, folder)
        gguf = gguf_file(name, progress)
        folder.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
        try:
            if progress:
                progress(f"converting {spec.name} (minutes, ~14 GB of memory at peak)", 0, 1)
            convert_gguf(gguf, work)
            if folder.exists():
                shutil.rmtree(folder)
            work.rename(folder)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        _record(folder, marker)
        if progress:
            progress(f"converting {spec.name}", 1, 1)
    return folder


def _adopt_old_marker(marker: Path, sha256: str) -> bool:
    """Record the files of a folder converted by an older version, whose marker held only the
    GGUF's sha256, as they are now (trusted once, instead of minutes of converting again)."""
    try:
        old = marker.read_text().strip() == sha256
    except (OSError, UnicodeDecodeError):
        return False
    if not old:
        return False
    log.warning("%s: recording the files of a folder converted by an older version", marker.parent)
    _record(marker.parent, marker)
    return True


def _record(folder: Path, marker: Path) -> None:
    """Hash every file under ``folder`` (but the marker) and write ``marker``."""
    records = {
        str(f.relative_to(folder)): FileRecord.of(f, sha256_file(f))
        for f in sorted(folder.rglob("*"))
        if f.is_file() and f != marker
    }
    write_marker(marker, records)


def verify(name: str, progress: Progress | None = None) -> bool:
    """Re-hash every file of the converted folder of ``name`` against its marker. False (and the
    marker removed, so the next use converts again) when any differs or the marker is bad."""
    marker = model_dir(name) / READY_MARKER
    with file_lock(model_dir(name).with_name(f"{spec_of(name).name}.lock")):
        if recheck(marker, progress, everything=True):
            return True
        marker.unlink(missing_ok=True)
    return False


def resolve(name_or_path: str, progress: Progress | None = None) -> Path:
    """A model folder for a packaged name (converting it lazily) or an existing local folder."""
    if name_or_path in PREPARED:
        return prepare(name_or_path, progress)
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        known = ", ".join(PREPARED)
        raise FileNotFoundError(
            f"model {name_or_path!r} is neither a packaged model ({known}) nor a local folder"
        )
    return path
