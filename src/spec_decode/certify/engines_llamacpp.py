"""llama-cpp-python's own speculative generation as an engine to audit end to end
(:mod:`~spec_decode.certify.engine_audit`; the ``llama`` and ``hf`` extras):
``Llama(draft_model=LlamaPromptLookupDecoding()).generate(...)``, whose verification is
sample-and-match (each drafted position is sampled from its row of the drafted block, and the
draft is kept while the sample equals it), on a tiny random GGUF written in code; and plain
``Llama.generate`` as the control that checks the adapter itself (it must PASS).

Sample-and-match is exact when a block's rows are the rows one-token passes give; on this
project's exact-rows build of llama.cpp (what ``spec-decode build-kernels`` installs) they are,
bitwise. The reference is the same ``Llama``'s row after the prefix (``logits_all``), warped by
:meth:`~spec_decode.core.sampling.SamplingParams.warp`. llama.cpp's sampler chain applies top-k,
top-p and min-p before the temperature, :meth:`~spec_decode.core.sampling.SamplingParams.warp`
after it; the two agree for temperature and top-k, so only those are accepted.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from spec_decode.certify.tiny_gguf import TOKENS, tiny_weights, write_gguf
from spec_decode.core.sampling import SamplingParams

#: The special tokens and the word boundary, then five letters: a vocabulary of 9.
VOCABULARY = [*TOKENS[:4], "a", "b", "c", "d", "e"]
#: The prompt every audit of these engines starts from (repeating, so that lookup drafts).
PREFIX = (7, 8, 7, 8, 7, 8, 7, 8)
#: How peaked the tiny model's rows are (a multiple of its random output layer).
LOGIT_SCALE = 1.5
CONTEXT = 256  # llama.cpp keeps at least 256 positions


def tiny_model_file(file: Path) -> Path:
    """Write the tiny random GGUF these audits run on (:data:`VOCABULARY`) to ``file``."""
    weights = tiny_weights(4, logit_scale=LOGIT_SCALE, vocab=len(VOCABULARY))
    weights["output.weight"][2] = 0.0  # EOS: (almost) never likely, so no early end
    return write_gguf(file, weights, VOCABULARY, context=CONTEXT)


class LlamaCppPythonEngine:
    """``Llama.generate`` with prompt-lookup drafts (``mode`` "prompt-lookup", 3 tokens after a
    match of up to 2) or without (``mode`` "plain"), one thread, on a tiny random GGUF."""

    prefix = PREFIX

    def __init__(self, mode: str) -> None:
        from spec_decode.backends.llamacpp.library import load

        load()  # the exact-rows libraries (or llama-cpp-python's own), before llama_cpp
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        if mode not in ("prompt-lookup", "plain"):
            raise ValueError(f"unknown mode {mode!r}; choose prompt-lookup or plain")
        self._folder = tempfile.TemporaryDirectory(prefix="spec-decode-audit-")
        path = str(tiny_model_file(Path(self._folder.name) / "tiny.gguf"))
        draft = LlamaPromptLookupDecoding(max_ngram_size=2, num_pred_tokens=3)
        options: dict[str, Any] = {"n_ctx": CONTEXT, "n_threads": 1, "verbose": False}
        self._engine = Llama(
            path, draft_model=draft if mode == "prompt-lookup" else None, **options
        )
        self._reference = Llama(path, logits_all=True, **options)
        self.vocab_size = len(VOCABULARY)

    def target_probs(self, prefix: Sequence[int], sampling: SamplingParams) -> np.ndarray:
        _check(sampling)
        self._reference.reset()
        self._reference.eval(list(prefix))
        logits = np.asarray(self._reference.scores[self._reference.n_tokens - 1], np.float64)
        probs = np.exp(logits - logits.max())
        return sampling.warp(probs / probs.sum())

    def generate(
        self, prefix: Sequence[int], n_tokens: int, sampling: SamplingParams, seed: int
    ) -> list[int]:
        _check(sampling)
        self._engine.set_seed(seed)
        tokens: list[int] = []
        for token in self._engine.generate(
            list(prefix), top_k=sampling.top_k or 0, top_p=1.0, min_p=0.0,
            temp=sampling.temperature, reset=True,
        ):  # fmt: skip
            tokens.append(int(token))
            if len(tokens) == n_tokens:
                break
        return tokens


def _check(sampling: SamplingParams) -> None:
    """Refuse controls where llama.cpp's sampler order and :meth:`SamplingParams.warp` differ."""
    if sampling.top_p < 1 or sampling.min_p > 0:
        raise ValueError(
            "llama.cpp applies top-p and min-p before the temperature; audit this engine with "
            "temperature and top-k only"
        )
