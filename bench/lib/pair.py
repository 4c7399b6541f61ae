"""Loading the packaged pair on the transformers backend, timed, for the benchmarks that run it
in process."""

from __future__ import annotations

import time


def load_transformers_pair() -> tuple[object, object, object, dict[str, float]]:
    """The packaged pair on the transformers backend (fp16 target, int8 draft), its tokenizer,
    and the seconds each load took."""
    from transformers.utils import logging as hf_logging

    from spec_decode.backends import converted
    from spec_decode.backends.registry import DEFAULT_DRAFT, DEFAULT_TARGET
    from spec_decode.backends.transformers import load_model, load_tokenizer

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    seconds = {}
    start = time.perf_counter()
    target = load_model(converted.prepare(DEFAULT_TARGET), "fp16")
    seconds["target (fp16)"] = time.perf_counter() - start
    start = time.perf_counter()
    draft = load_model(converted.prepare(DEFAULT_DRAFT), "int8")
    seconds["draft (int8)"] = time.perf_counter() - start
    tokenizer = load_tokenizer(converted.model_dir(DEFAULT_TARGET))
    return target, draft, tokenizer, seconds
