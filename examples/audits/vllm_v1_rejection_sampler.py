"""Adapter for vllm-project/vllm ``vllm/v1/sample/rejection_sampler.py``
(commit 7f6fc1c5ce8d02f473b1b923debbfef3fa0b7a6a), the V1 engine's ``rejection_sample``,
rewritten as a chain rule for the auditor.

Per request and step upstream:

* **greedy requests** (temperature 0) take their own kernel, ``rejection_greedy_sample_kernel``:
  it never looks at the draft's probabilities; at each position it emits the target's argmax and
  stops after the first position where the draft differs from it; when every draft matched it
  appends the bonus token, which the ordinary sampler drew greedily from the last row;
* **random requests**: the target's logits for the drafted positions are cast to float32, warped
  (``apply_sampling_constraints``: temperature, top-k, top-p) and softmaxed in float32; a uniform
  per position (``torch.rand``, float64) accepts draft x when ``q(x) > 0`` and
  ``p(x) / q(x) >= u`` (``rejection_random_sample_kernel``); at the first rejection it emits the
  recovered token ``argmax(max(p - q, 0) / E)`` with ``E ~ Exp(1)`` float32, one vector per
  request shared by its positions (``sample_recovered_tokens``): an exact draw of the normalised
  residual, and only one position's recovered token is ever used per step. After a full block,
  the bonus token the sampler drew from the last row. If the residual row is all zero (possible
  only through float32 rounding) the argmax of zeros is token 0;
* without draft probabilities (``draft_probs is None``: n-gram drafts and other proposers that
  report none) the draft's probability counts as 1: x is accepted when ``p(x) >= u`` and the
  recovered token is drawn from p with x masked out. That is the exact rule for a one-hot q, and
  it is exact whatever the proposal: given any candidate x, keeping it with probability p(x) and
  otherwise drawing from p without x yields p.

Here: the greedy branch is selected through the ``sampling`` keyword (the auditor passes the
case's controls; at temperature 0 it hands one-hot rows, whose argmax is the target's argmax),
uniforms are ``rng.uniform()`` (only compared, so enumerated exactly), the exponential race is
``rng.categorical`` of the same float32 row, and the search stops at the first rejection (later
positions are not used). The target and draft rows the auditor passes are already warped by the
case's controls; the grid has no min-p case, so whether min-p reaches the drafted positions is not
exercised. Computed in float32 like upstream, ``rule`` sits at the float32 rounding floor: it FAILs
the default tolerance (1e-9) and is judged with ``--tolerance 1e-6``.

``rule_without_draft_probs`` is the ``draft_probs is None`` path. It ignores q, so it is audited
with ``drafter``, a proposer that drafts the draft model's most likely token and says so with a
one-hot q (what an n-gram or argmax proposer is); it passes with the auditor's sampling drafter
too.

    spec-decode audit examples.audits.vllm_v1_rejection_sampler:rule --tolerance 1e-6
    spec-decode audit examples.audits.vllm_v1_rejection_sampler:rule_without_draft_probs \\
        --drafter examples.audits.vllm_v1_rejection_sampler:drafter --tolerance 1e-6
"""

from __future__ import annotations

import numpy as np

from spec_decode.certify.zoo import one_hot_drafter


def _greedy(p: np.ndarray, draft_tokens: list[int]) -> list[int]:
    """``rejection_greedy_sample_kernel``: the target's argmax until the draft differs."""
    emitted: list[int] = []
    for i, token in enumerate(draft_tokens):
        target_argmax = int(np.argmax(p[i]))
        emitted.append(target_argmax)
        if token != target_argmax:
            return emitted
    emitted.append(int(np.argmax(p[len(draft_tokens)])))  # the sampler's greedy bonus token
    return emitted


def _race(prob: np.ndarray, rng) -> int:
    """``argmax(prob / E)``, E ~ Exp(1): a draw of prob / sum(prob); token 0 when prob is zero."""
    if not np.any(prob > 0):
        return 0
    return rng.categorical(prob.astype(float))


def rule(p: np.ndarray, q: np.ndarray, draft_tokens, rng, sampling) -> list[int]:
    """``rejection_sample`` with draft probabilities (a draft model's proposer)."""
    draft_tokens = [int(t) for t in draft_tokens]
    if sampling.greedy:
        return _greedy(p, draft_tokens)
    p32 = np.asarray(p, dtype=np.float32)
    q32 = np.asarray(q, dtype=np.float32)
    emitted: list[int] = []
    for i, token in enumerate(draft_tokens):
        draft_prob, target_prob = q32[i, token], p32[i, token]
        if draft_prob > 0 and rng.uniform() <= float(target_prob / draft_prob):
            emitted.append(token)
        else:
            emitted.append(_race(np.maximum(p32[i] - q32[i], np.float32(0.0)), rng))
            return emitted
    emitted.append(rng.categorical(p32[len(draft_tokens)].astype(float)))
    return emitted


def rule_without_draft_probs(
    p: np.ndarray, q: np.ndarray, draft_tokens, rng, sampling
) -> list[int]:
    """``rejection_sample`` with ``draft_probs=None``: q is ignored (taken as one-hot)."""
    draft_tokens = [int(t) for t in draft_tokens]
    if sampling.greedy:
        return _greedy(p, draft_tokens)
    p32 = np.asarray(p, dtype=np.float32)
    emitted: list[int] = []
    for i, token in enumerate(draft_tokens):
        if rng.uniform() <= float(p32[i, token]):
            emitted.append(token)
        else:
            prob = p32[i].copy()
            prob[token] = 0
            emitted.append(_race(prob, rng))
            return emitted
    emitted.append(rng.categorical(p32[len(draft_tokens)].astype(float)))
    return emitted


#: The draft model's most likely token k times, reported with a one-hot q:
#: the zoo's ``one_hot_drafter`` (a control: exact with an exact rule).
drafter = one_hot_drafter
