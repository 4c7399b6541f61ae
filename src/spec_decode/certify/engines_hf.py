"""Hugging Face transformers' own speculative generation as engines to audit end to end
(:mod:`~spec_decode.certify.engine_audit`; the ``hf`` extra, transformers as pinned there):
``generate(assistant_model=draft, do_sample=True)``, ``generate(prompt_lookup_num_tokens=3,
do_sample=True)`` and ``generate(assistant_early_exit=1, do_sample=True)`` (self-speculation from
the target's first layer: its ``EarlyExitCandidateGenerator``), on tiny random Qwen2 models built
in code (8 tokens, one layer, two for early exit; no hub), and
plain ``generate(do_sample=True)`` as the control that checks the adapter itself (it must PASS:
the reference is computed right).

The reference is the target's next-token distribution from its own forward pass, warped by
:meth:`~spec_decode.core.sampling.SamplingParams.warp` (temperature, then top-k, top-p, min-p:
the order of transformers' warpers). A prompt that repeats itself (:data:`PREFIX`) gives prompt
lookup something to copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from spec_decode.core.sampling import SamplingParams

#: transformers' generation modes audited ("plain": no speculation, the control).
MODES = ("assisted", "prompt-lookup", "early-exit", "plain")
VOCAB = 8
#: The prompt every audit of these engines starts from (repeating, so that lookup drafts).
PREFIX = (1, 2, 3, 1, 2, 3, 1, 2)
#: How sharply peaked the tiny models' rows are (a multiple of the random output layer).
LOGIT_SCALE = 8.0


def _tiny_qwen2(seed: int, layers: int = 1) -> Any:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(LOGIT_SCALE)
    return model.eval()


class HFEngine:
    """transformers' ``generate`` on the tiny pair, in ``mode`` "assisted" (the draft model),
    "prompt-lookup", "early-exit" (drafts from the target's first layer) or "plain" (no
    speculation: the control)."""

    prefix = PREFIX

    def __init__(self, mode: str) -> None:
        import torch
        import transformers

        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}")
        transformers.logging.set_verbosity_error()
        torch.set_num_threads(1)
        self.mode, self.vocab_size = mode, VOCAB
        self.target = _tiny_qwen2(0, layers=2 if mode == "early-exit" else 1)
        self.draft = _tiny_qwen2(1)
        self.version = transformers.__version__

    def target_probs(self, prefix: Sequence[int], sampling: SamplingParams) -> np.ndarray:
        import torch

        with torch.no_grad():
            logits = self.target(torch.tensor([list(prefix)])).logits[0, -1].double()
        return sampling.warp(torch.softmax(logits, dim=-1).numpy())

    def generate(
        self, prefix: Sequence[int], n_tokens: int, sampling: SamplingParams, seed: int
    ) -> list[int]:
        import torch

        options: dict[str, Any] = {
            "do_sample": True, "temperature": sampling.temperature, "top_k": sampling.top_k or 0,
            "top_p": sampling.top_p, "max_new_tokens": n_tokens, "min_new_tokens": n_tokens,
            "pad_token_id": 0,
        }  # fmt: skip
        if sampling.min_p:
            options["min_p"] = sampling.min_p
        if self.mode == "assisted":
            options["assistant_model"] = self.draft
        elif self.mode == "prompt-lookup":
            options["prompt_lookup_num_tokens"] = 3
        elif self.mode == "early-exit":
            options["assistant_early_exit"] = 1
        torch.manual_seed(seed)
        with torch.no_grad():
            out = self.target.generate(torch.tensor([list(prefix)]), **options)
        return [int(t) for t in out[0, len(prefix) :]]
