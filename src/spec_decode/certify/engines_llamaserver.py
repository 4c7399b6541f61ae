"""llama.cpp's ``llama-server`` as an engine to audit end to end
(:mod:`~spec_decode.certify.engine_audit`), driven over HTTP: its speculative generation
(``--spec-type ngram-simple`` or ``ngram-mod``, or the packaged 0.5B draft model) with a seed and
the token ids returned, against its own plain decoding, a second ``llama-server`` without
speculation. Both serve the packaged Qwen2.5-Coder-1.5B target (or a GGUF given), one slot, the
prompt cache on, as a user runs them.

llama-server verifies by sample-and-match: it samples the target at each drafted position from
that position's row of the drafted block, and keeps the draft while the sample equals it. That is
exact where a block's rows are the rows one-token passes give, and not otherwise (llama.cpp's
batched matmuls are not batch-invariant: #27407).

The reference rows are the plain server's, read back as post-sampling probabilities of its
``top`` most likely tokens (``n_probs``) after the temperature and top-k, as plain decoding
samples them. A row is asked for the way plain decoding computes it: with the prompt cache on, a
request evaluates only what differs from the cached sequence, so the adapter walks the cache one
token at a time and every row is a one-token pass after the prefix (the prefix is read once,
before the audit, as a warm cache holds it). The mass past the ``top`` tokens is not listed: the
auditor pools it (:func:`~spec_decode.certify.engine_audit.exact_joint`). llama.cpp's sampler
chain applies top-p and min-p before the temperature; only temperature and top-k are accepted,
where the two orders agree. The end-of-generation token is masked (``ignore_eos``) in both, so
every run emits its tokens.

The binary is ``$SPEC_DECODE_LLAMA_SERVER`` or ``llama-server`` on the ``PATH``: a default build of
the llama.cpp that llama-cpp-python's sdist vendors (BENCHMARKS.md says how).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from spec_decode.certify.local_server import LocalServer, free_port
from spec_decode.core.sampling import SamplingParams

#: What drafts, by mode ("plain": no speculation, the control that checks the adapter itself).
MODES = ("ngram-simple", "ngram-mod", "draft", "plain")
#: The environment variable naming the llama-server binary.
BINARY_ENV = "SPEC_DECODE_LLAMA_SERVER"
#: The text every audit starts from: code that repeats, so that the n-gram drafters draft at
#: once and the draft model agrees with the target often.
PREFIX_TEXT = (
    "def area(width, height):\n    return width * height\n\n\n"
    "def area(width, height):\n    return width *"
)
#: Tokens listed per reference row (post-sampling probabilities, most likely first).
TOP = 64
#: Continuations less likely than this under plain decoding are pooled into one cell.
MIN_MASS = 1e-3


class LlamaServerEngine:
    """``llama-server`` speculating by ``mode`` (:data:`MODES`), audited against a plain
    ``llama-server`` on the same ``model`` (default: the packaged target), ``threads`` each, from
    the tokens of ``prefix_text``, the speculative one with ``options`` added after
    its own drafter settings; reference rows list ``top`` tokens, and continuations below
    ``min_mass`` are pooled; ``drafted`` and ``accepted`` count the drafts the speculative server
    reports, so that a PASS is known to have verified some."""

    def __init__(
        self,
        mode: str,
        *,
        binary: str | None = None,
        model: Path | None = None,
        draft: Path | None = None,
        threads: int = 1,
        prefix_text: str = PREFIX_TEXT,
        top: int = TOP,
        min_mass: float = MIN_MASS,
        options: Sequence[str] = (),
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
        binary = binary or os.environ.get(BINARY_ENV) or shutil.which("llama-server")
        if not binary:
            raise ValueError(
                f"no llama-server: set {BINARY_ENV} to the binary, or put it on the PATH"
            )
        model, draft = _models(mode, model, draft)
        self.top, self.min_mass = top, min_mass
        self._folder = tempfile.TemporaryDirectory(prefix="spec-decode-llama-server-")
        log = Path(self._folder.name) / "servers.log"
        common = [binary, "-m", str(model), "-t", str(threads), "-np", "1", "-c", "2048",
                  "--no-webui", "--host", "127.0.0.1"]  # fmt: skip
        # n-gram drafts of 4 tokens after a 4-token match: at llama-server's default lengths
        # (drafts of 48 tokens and up) it drafted nothing for a request of a few tokens, and an
        # audit whose engine verified no draft judges plain decoding only. A draft model drafts
        # only under --spec-type draft-simple (with -md alone this build drafts nothing).
        speculation = {
            "ngram-simple": ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "4",
                             "--spec-ngram-simple-size-m", "4"],
            "ngram-mod": ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "4",
                          "--spec-ngram-mod-n-min", "1", "--spec-ngram-mod-n-max", "4"],
            "draft": ["--spec-type", "draft-simple", "-md", str(draft), "-td", str(threads)],
            "plain": [],
        }[mode]  # fmt: skip
        self._servers: list[LocalServer] = []
        self._plain = self._start([*common], log)
        self._speculative = self._start([*common, *speculation, *options], log)
        self.vocab_size = int(self._plain.get("/v1/models")["data"][0]["meta"]["n_vocab"])
        self.prefix = tuple(self._plain.post("/tokenize", {"content": prefix_text})["tokens"])
        self._rows: dict[tuple[int, ...], np.ndarray] = {}
        self._cached: tuple[int, ...] = ()
        warm = SamplingParams()  # each server reads the prefix once, as a warm cache holds it
        self._row(self.prefix, warm)
        self.drafted = self.accepted = 0
        self.generate(self.prefix, 1, warm, seed=0)
        self.drafted = self.accepted = 0  # the speculative server's drafts, as it reports them

    def _start(self, command: list[str], log: Path) -> LocalServer:
        port = free_port()
        server = LocalServer([*command, "--port", str(port)], port, log)
        server.start()
        self._servers.append(server)
        return server

    def target_probs(self, prefix: Sequence[int], sampling: SamplingParams) -> np.ndarray:
        """The plain server's next-token row after ``prefix`` under ``sampling``: its top
        :attr:`top` post-sampling probabilities, zero elsewhere (the rest of the mass pooled by
        the auditor)."""
        key = tuple(int(t) for t in prefix)
        if key not in self._rows:
            shared = _common_length(self._cached, key)
            first = min(max(shared + 1, len(self.prefix)), len(key))  # the cache re-reads one
            for end in range(first, len(key) + 1):
                self._rows[key[:end]] = self._row(key[:end], sampling)  # one new token each
        return self._rows[key]

    def _row(self, prompt: tuple[int, ...], sampling: SamplingParams) -> np.ndarray:
        body = {**_controls(sampling), "prompt": list(prompt), "n_predict": 1,
                "n_probs": self.top, "post_sampling_probs": True}  # fmt: skip
        answer = self._plain.post("/completion", body)
        self._cached = prompt
        if not answer.get("completion_probabilities"):  # seen with a prompt it holds cached
            raise RuntimeError(
                f"llama-server gave no probabilities for a {len(prompt)}-token prompt it had "
                "cached; audit fewer tokens"
            )
        row = np.zeros(self.vocab_size)
        for entry in answer["completion_probabilities"][0]["top_probs"]:
            row[int(entry["id"])] = float(entry["prob"])
        return row

    def generate(
        self, prefix: Sequence[int], n_tokens: int, sampling: SamplingParams, seed: int
    ) -> list[int]:
        body = {**_controls(sampling), "prompt": [int(t) for t in prefix], "n_predict": n_tokens,
                "seed": seed, "return_tokens": True}  # fmt: skip
        answer = self._speculative.post("/completion", body)
        timings = answer.get("timings", {})
        self.drafted += int(timings.get("draft_n", 0))
        self.accepted += int(timings.get("draft_n_accepted", 0))
        return [int(t) for t in answer["tokens"]]

    def close(self) -> None:
        """Stop both servers (those started: a constructor that refused its arguments started
        none)."""
        for server in getattr(self, "_servers", ()):
            server.stop()
        if hasattr(self, "_folder"):
            self._folder.cleanup()

    def __del__(self) -> None:
        self.close()


def _controls(sampling: SamplingParams) -> dict[str, Any]:
    """The request fields of ``sampling``: temperature then top-k only (where llama.cpp's
    sampler order and :meth:`SamplingParams.warp` agree), the end-of-generation token masked,
    the prompt cache on."""
    if sampling.top_p < 1 or sampling.min_p > 0:
        raise ValueError(
            "llama.cpp applies top-p and min-p before the temperature; audit this engine with "
            "temperature and top-k only"
        )
    return {
        "temperature": sampling.temperature, "top_k": sampling.top_k or 0, "top_p": 1.0,
        "min_p": 0.0, "samplers": ["top_k", "temperature"], "ignore_eos": True,
        "cache_prompt": True,
    }  # fmt: skip


def _models(mode: str, model: Path | None, draft: Path | None) -> tuple[Path, Path | None]:
    """The GGUFs to serve: those given, else the packaged pair (assembled on first use); a
    draft only in ``draft`` mode."""
    if model is None or (mode == "draft" and draft is None):
        from spec_decode.backends import assembly, registry  # the qwen extra

        model = model or assembly.gguf_file(registry.DEFAULT_TARGET)
        if mode == "draft":
            draft = draft or assembly.gguf_file(registry.DEFAULT_DRAFT)
    return model, draft if mode == "draft" else None


def _common_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
