"""Loading a local transformers folder onto a device in a weight format: fp16, int8 or fp32
linear layers on the CPU (:mod:`spec_decode.backends.transformers.cpu_linear`), bf16, fp16 or
fp32 on CUDA."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from spec_decode.backends.transformers.cpu_linear import pack_linears
from spec_decode.backends.transformers.model import TransformersModel

#: The devices :func:`load_model` accepts.
DEVICES = ("cpu", "cuda")
#: Weight formats on CUDA: the GPU's own half-precision matrix kernels (no CPU packing).
_CUDA_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def load_model(path: str | Path, weights: str = "fp16", device: str = "cpu") -> TransformersModel:
    """Load a local transformers folder onto ``device`` with the given weight format.

    On the CPU ``weights`` is the linear-layer format: ``"fp16"`` (use for targets), ``"int8"``
    (cheapest; drafts only) or ``"fp32"``. On ``"cuda"`` the whole model is loaded in ``"bf16"``,
    ``"fp16"`` or ``"fp32"`` and runs on the GPU's kernels; whether block scores agree with
    one-token scores there is a property of those kernels, unmeasured here (no GPU was available).
    """
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; choose one of {', '.join(DEVICES)}")
    folder = existing_folder(path)
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("device cuda requested but torch sees no CUDA device")
        if weights not in _CUDA_DTYPES:
            raise ValueError(f"on cuda, weights must be one of {', '.join(_CUDA_DTYPES)}")
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=_CUDA_DTYPES[weights])
        return TransformersModel(model.to("cuda"))
    # Read fp16 and pack each linear layer from it, so no full fp32 copy of the weights ever
    # exists; the remaining parameters (embeddings, norms) then compute in fp32.
    dtype = torch.float32 if weights == "fp32" else torch.float16
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
    return TransformersModel(pack_linears(model, weights).float())


def existing_folder(path: str | Path) -> Path:
    """``path`` as a folder holding a transformers ``config.json``, or a clear error."""
    folder = Path(path).expanduser()
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"no transformers model folder (with config.json) at {folder}")
    return folder
