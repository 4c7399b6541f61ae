"""Adapter for vllm-project/vllm ``vllm/model_executor/layers/rejection_sampler.py``
(commit 700e4a361a4ad38a4a394796d9658ceb69721fad), the V0 engine's ``RejectionSampler``,
rewritten as a chain rule for the auditor.

Upstream's docstrings call the target's distribution q and the draft's p; its tensors are named
as ours (``target_probs`` is p, ``draft_probs`` is q). Everything is float32 (``probs_dtype``).
Per request and step it:

* draws k uniforms (``torch.rand``) and marks every draft accepted where
  ``u_i < min(p_i(x_i) / q_i(x_i), 1)`` (all k at once, "without causality"); the output keeps
  the drafts before the first rejection;
* builds a recovered distribution per position, ``f = clamp(p - q, min=tiny)`` with
  ``tiny = torch.finfo(float32).tiny`` (about 1.2e-38, to avoid dividing by zero on rows it will
  not use), normalised, and samples it with an exponential race, ``argmax(f / E)`` with
  ``E ~ Exp(1)`` (``_multinomial``): an exact draw of ``f / sum(f)``. The token at the first
  rejection is emitted;
* when all k are accepted, appends the bonus token the target's ordinary sampler drew from its
  last row (``bonus_token_ids``).

Here: the uniforms are ``rng.uniform()`` (only compared, so enumerated exactly), the exponential
race is ``rng.categorical`` of the same float32 row (it has that distribution), and the search
stops at the first rejection, which gives the same output (the later uniforms and recovered draws
are independent and unused) and keeps the enumeration within budget. The clamp is kept: tokens
where p <= q keep a weight of about 1e-38, so a rejection can (with that probability) emit a token
the target gives probability 0. Greedy requests need no branch here: V0's sampler hands the
rejection sampler one-hot rows for them (``_modify_greedy_probs_inplace``), which is what the
auditor passes at temperature 0.

Computed in float32 like upstream, the rule sits at the float32 rounding floor, so it FAILs the
default tolerance (1e-9) and is judged with ``--tolerance 1e-6``. ``rule_without_bonus`` is
``disable_bonus_tokens=True`` (the constructor's default at this commit): when all k are
accepted only the k drafts are emitted, in the output and the context alike, which is exact.

    spec-decode audit examples.audits.vllm_v0_rejection_sampler:rule --tolerance 1e-6
    spec-decode audit examples.audits.vllm_v0_rejection_sampler:rule_without_bonus --tolerance 1e-6
"""

from __future__ import annotations

import numpy as np

_TINY = np.finfo(np.float32).tiny


def _recovered(p_row: np.ndarray, q_row: np.ndarray) -> np.ndarray:
    """``_get_recovered_probs`` for one position: clamp(p - q, min=tiny), normalised (float32)."""
    f = np.maximum(p_row - q_row, _TINY)
    return f / f.sum(dtype=np.float32)


def _verify(p, q, draft_tokens, rng, bonus: bool) -> list[int]:
    p32 = np.asarray(p, dtype=np.float32)
    q32 = np.asarray(q, dtype=np.float32)
    emitted: list[int] = []
    for i, token in enumerate(draft_tokens):
        capped_ratio = np.minimum(p32[i, token] / q32[i, token], np.float32(1.0))
        if rng.uniform() < float(capped_ratio):
            emitted.append(int(token))
        else:
            emitted.append(rng.categorical(_recovered(p32[i], q32[i]).astype(float)))
            return emitted
    if bonus:
        emitted.append(rng.categorical(p32[len(draft_tokens)].astype(float)))
    return emitted


def rule(p: np.ndarray, q: np.ndarray, draft_tokens, rng) -> list[int]:
    """``RejectionSampler`` with bonus tokens enabled (``disable_bonus_tokens=False``)."""
    return _verify(p, q, list(draft_tokens), rng, bonus=True)


def rule_without_bonus(p: np.ndarray, q: np.ndarray, draft_tokens, rng) -> list[int]:
    """``RejectionSampler(disable_bonus_tokens=True)``: no bonus token after a full block."""
    return _verify(p, q, list(draft_tokens), rng, bonus=False)
