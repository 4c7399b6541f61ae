"""Load a model and its tokenizer on the chosen backend, by packaged name or local path.

Two backends serve real models: llama.cpp (``[llama]`` extra; runs a GGUF as shipped, the
default for the packaged Qwen pair and any ``.gguf`` file) and transformers (``[hf]`` extra; any
local transformers folder, or the packaged pair converted once by ``models prepare``). Heavy
imports happen inside the functions, so choosing a backend costs nothing until it is used.

A packaged model's file is verified before it is read (:mod:`spec_decode.backends.assembly`), and
llama.cpp reads it into memory rather than mapping it (:class:`LlamaCppModel`'s ``mmap``): a
mapped file that is truncated or overwritten while a run uses it kills the process (SIGBUS) or
silently changes its weights, whereas weights read into memory cannot change under the run. If
the file changed while it was being read, it is verified (re-assembled) and read once more.
"""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spec_decode.backends import assembly, converted
from spec_decode.backends.registry import PREPARED

BACKENDS = ("llama.cpp", "transformers")
#: Weight formats of the transformers backend by device, checked before anything loads (the
#: same as ``transformers.cpu_linear.WEIGHT_FORMATS`` and the CUDA dtypes of
#: ``transformers.weights``, which import torch; a test keeps them in step). llama.cpp runs a
#: GGUF's own quantization and takes none.
WEIGHTS = {"cpu": ("fp16", "int8", "fp32"), "cuda": ("bf16", "fp16", "fp32")}


@dataclass
class Loaded:
    """A loaded model with its backend, tokenizer, the ids that end generation, and load time;
    opened as several slots (llama.cpp), ``model`` is the first and ``slots`` all of them, with
    the ``batcher`` that decodes their calls together (:mod:`.llamacpp.slots`)."""

    backend: str
    model: Any
    tokenizer: Any
    stop_ids: frozenset[int]
    seconds: float
    slots: tuple[Any, ...] = ()
    batcher: Any = None

    def __post_init__(self) -> None:
        self.slots = self.slots or (self.model,)


def choose_backend(requested: str, target: str) -> str:
    """``requested`` itself, or for "auto": llama.cpp for a packaged name or a ``.gguf`` file
    when llama-cpp-python is installed, transformers otherwise."""
    if requested != "auto":
        if requested not in BACKENDS:
            raise ValueError(f"unknown backend {requested!r}; choose auto, {', '.join(BACKENDS)}")
        return requested
    has_llama = importlib.util.find_spec("llama_cpp") is not None
    if target.endswith(".gguf") or (target in PREPARED and has_llama):
        return "llama.cpp"
    return "transformers"


def load(
    backend: str,
    name_or_path: str,
    *,
    weights: str = "fp16",
    threads: int | None = None,
    device: str = "cpu",
    draft: bool = False,
    slots: int = 1,
) -> Loaded:
    """Load ``name_or_path`` (a packaged name, a GGUF file or a transformers folder) as the
    target or, with ``draft``, as a draft; on llama.cpp as ``slots`` sequences sharing the
    weights, decoded together (:mod:`.llamacpp.slots`; one on transformers).

    ``weights`` and ``device`` apply to transformers only (on the CPU fp16, fp32 or int8 linear
    layers; on cuda bf16, fp16 or fp32); ``threads`` to llama.cpp only (default: every core),
    which runs on the CPU, and checks a target's block rows (:mod:`.llamacpp.promise`). An
    unknown ``weights`` is refused on either backend.
    """
    check_weights(backend, weights, device)
    if backend == "llama.cpp":
        if device != "cpu":
            raise ValueError("the llama.cpp backend runs on the CPU; use --backend transformers")
        return _load_llamacpp(name_or_path, threads, check_rows=not draft, slots=slots)
    if backend == "transformers":
        return _load_transformers(name_or_path, weights, device)
    raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")


def check_weights(backend: str, weights: str, device: str = "cpu") -> None:
    """Refuse a weight format the backend does not know, before anything is loaded: on
    transformers one of :data:`WEIGHTS` for the device; on llama.cpp, which runs the GGUF's own
    quantization, any of them is let through unchanged and anything else is refused."""
    if backend == "transformers" and device in WEIGHTS:
        known = WEIGHTS[device]
        if weights not in known:
            raise ValueError(
                f"unknown weight format {weights!r} for transformers on {device}; "
                f"choose one of {', '.join(known)}"
            )
    elif backend == "llama.cpp" and weights not in {w for ws in WEIGHTS.values() for w in ws}:
        raise ValueError(
            f"unknown weight format {weights!r}; llama.cpp runs the GGUF's own quantization "
            "and takes no weight format (fp16, int8, fp32 and bf16 apply to transformers)"
        )


def check_pair(target: Loaded, draft: Loaded) -> None:
    """Raise ``ValueError`` unless draft and target share a vocabulary and a tokenizer
    (speculative decoding compares distributions over the same token ids): the backend's own
    check."""
    if target.backend == "llama.cpp":
        from spec_decode.backends.llamacpp import check_pair as check_llamacpp_pair

        check_llamacpp_pair(target.tokenizer, draft.tokenizer)
    else:
        from spec_decode.backends.transformers import check_pair as check_transformers_pair

        check_transformers_pair(target.model, draft.model, target.tokenizer, draft.tokenizer)


def resolve_gguf(name_or_path: str) -> Path:
    """The GGUF file of a packaged model name (assembled on first use) or a path."""
    if name_or_path in PREPARED:
        return assembly.gguf_file(name_or_path)
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        known = ", ".join(PREPARED)
        raise FileNotFoundError(
            f"model {name_or_path!r} is neither a packaged model ({known}) nor a GGUF file"
        )
    return path


def _load_llamacpp(name_or_path: str, threads: int | None, check_rows: bool, slots: int) -> Loaded:
    from spec_decode.backends.llamacpp import load_model, load_tokenizer, open_slots

    def read() -> tuple[Any, ...]:
        path = resolve_gguf(name_or_path)
        if slots > 1:
            return open_slots(path, slots, n_threads=threads, check_rows=check_rows)
        return (load_model(path, n_threads=threads, check_rows=check_rows),), None

    start = time.perf_counter()
    models, batcher = read()
    if name_or_path in PREPARED and not assembly.is_verified(name_or_path):
        models[0].close()  # the file changed while it was read: verify it again, read it again
        models, batcher = read()
        if not assembly.is_verified(name_or_path):
            raise ValueError(
                f"{name_or_path}: {assembly.gguf_path(name_or_path)} keeps changing while it is "
                "read; stop whatever writes to it, then run: spec-decode models verify"
            )
    tokenizer = load_tokenizer(models[0])
    seconds = time.perf_counter() - start
    return Loaded(
        "llama.cpp", models[0], tokenizer, tokenizer.eog_ids, seconds, tuple(models), batcher
    )


def _load_transformers(name_or_path: str, weights: str, device: str) -> Loaded:
    folder = converted.resolve(name_or_path)  # a missing folder fails before torch is imported
    from transformers.utils import logging as hf_logging

    from spec_decode.backends.transformers import load_model, load_tokenizer

    hf_logging.disable_progress_bar()
    start = time.perf_counter()
    model = load_model(folder, weights, device)
    tokenizer = load_tokenizer(folder)
    declared = model.model.generation_config.eos_token_id
    stop = set(
        declared if isinstance(declared, list) else [declared] if declared is not None else []
    )
    if tokenizer.eos_token_id is not None:
        stop.add(tokenizer.eos_token_id)
    return Loaded("transformers", model, tokenizer, frozenset(stop), time.perf_counter() - start)
