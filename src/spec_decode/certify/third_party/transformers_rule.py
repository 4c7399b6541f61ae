"""Hugging Face transformers' own speculative sampler, wrapped as a rule the auditor can certify.

``transformers.generation.utils._speculative_sampling`` takes tensors and draws its randomness from
torch (``torch.rand_like`` for the acceptance tests, ``torch.multinomial`` for the next token).
While it runs, :func:`hf_speculative_sampling` routes those two calls through our
:class:`~spec_decode.core.randomness.RandomSource`: an acceptance test ``u <= ratio`` becomes
``bernoulli(min(1, ratio))`` and the multinomial draw becomes ``categorical``. The function itself
is unmodified, so the auditor enumerates *its* branches exactly. Needs the ``hf`` extra.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from spec_decode.core.randomness import RandomSource


@contextmanager
def _torch_randomness_from(rng: RandomSource) -> Iterator[None]:
    """Temporarily make ``torch.rand_like`` and ``torch.multinomial`` draw from ``rng``."""
    import torch

    def rand_like(ratio: torch.Tensor, **_: object) -> torch.Tensor:
        # u <= ratio holds for u = 0 and fails for u = 1 whenever ratio < 1.
        accepted = [rng.bernoulli(min(1.0, float(r))) for r in ratio.reshape(-1)]
        return torch.tensor([0.0 if a else 1.0 for a in accepted], dtype=ratio.dtype).reshape(
            ratio.shape
        )

    def multinomial(probs: torch.Tensor, num_samples: int, **_: object) -> torch.Tensor:
        if num_samples != 1:
            raise NotImplementedError("only single draws are routed")
        rows = probs.reshape(-1, probs.shape[-1]).double().numpy()
        return torch.tensor([[rng.categorical(row)] for row in rows]).reshape(*probs.shape[:-1], 1)

    saved = torch.rand_like, torch.multinomial
    torch.rand_like, torch.multinomial = rand_like, multinomial
    try:
        yield
    finally:
        torch.rand_like, torch.multinomial = saved


def _call(
    p: np.ndarray,
    q: np.ndarray,
    draft_tokens: Sequence[int],
    rng: RandomSource,
    ensemble_weight: float | None,
) -> list[int]:
    import torch
    from transformers.generation.utils import _speculative_sampling

    with np.errstate(divide="ignore"):
        target_logits = torch.from_numpy(np.log(p))[None]  # (1, k+1, V); softmax gives back p
        draft_logits = torch.from_numpy(np.log(q).reshape(len(draft_tokens), p.shape[1]))[None]
    candidates = torch.tensor([list(draft_tokens)], dtype=torch.long)
    with _torch_randomness_from(rng):
        tokens, _ = _speculative_sampling(
            candidates,
            draft_logits,
            len(draft_tokens),
            target_logits,
            assistant_ensemble_weight=ensemble_weight,
        )
    return [int(t) for t in tokens.reshape(-1)]


def hf_speculative_sampling(
    p: np.ndarray, q: np.ndarray, draft_tokens: Sequence[int], rng: RandomSource
) -> list[int]:
    """transformers' ``_speculative_sampling`` as shipped (lossless mode)."""
    return _call(p, q, draft_tokens, rng, ensemble_weight=None)


def hf_ensemble_verification(
    p: np.ndarray, q: np.ndarray, draft_tokens: Sequence[int], rng: RandomSource
) -> list[int]:
    """transformers' ``_speculative_sampling`` with ``assistant_ensemble_weight=0.5``.

    This opt-in mode (DIVERSE) verifies against 0.5 p + 0.5 q to raise acceptance, and is
    documented as biased: the audit should refute it.
    """
    return _call(p, q, draft_tokens, rng, ensemble_weight=0.5)
