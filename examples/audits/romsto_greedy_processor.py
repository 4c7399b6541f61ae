"""Adapter for romsto/Speculative-Decoding ``sampling/speculative_decoding.py`` with
``utils/logits_processor.py``'s ``GreedyProcessor`` (commit
db7db67604359d0380c330c240c276ec1f85ba65), the default ``logits_processor`` of
``speculative_generate``, rewritten as a chain rule and a drafter.

``GreedyProcessor(temperature)`` turns logits into ``softmax(logits / temperature)`` but
``sample`` takes the argmax. ``speculative_generate`` uses it on both sides:

* the drafter proposes ``argmax q`` at each of the gamma positions, while the full softmax q is
  what is stored for verification;
* verification is rejection sampling on those soft rows: ``r = torch.rand(gamma)``, n = the first
  i with ``r[i] > p_i(x_i) / q_i(x_i)``; after a rejection the next token is
  ``sample(max_fn(p[n] - q[n]))``, after a full block ``sample(p[gamma])``, and ``sample`` is
  again the argmax.

So the output is neither greedy decoding of the target nor a sample from it: the rule corrects for
a proposal distribution (q) the drafts were not drawn from and then takes argmaxes of the
corrected rows. On p = [.6, .4], q = [.9, .1] the draft is token 0 (greedy on the target also
gives 0); it is accepted with probability .6/.9 = 2/3, and otherwise ``max_fn(p - q)`` = [0, 1]
yields token 1: the wrong token with probability 1/3.

Here ``drafter`` is the proposal (argmax, reporting the soft q) and ``rule`` the verification
(``r[i]`` is ``rng.uniform()``, only compared, so enumerated exactly; the search stops at the
first rejection, which gives the same n). The rows the auditor passes are the processor's
softmax at the case's controls; at temperature 0 they are one-hot and the scheme reduces to
greedy decoding (exact), so the audit fails on the sampled cases. Float64 (upstream runs in the
models' dtype).

    spec-decode audit examples.audits.romsto_greedy_processor:rule \\
        --drafter examples.audits.romsto_greedy_processor:drafter
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _max_fn(x: np.ndarray) -> np.ndarray:
    positive = np.where(x > 0, x, 0.0)
    return positive / positive.sum()


def rule(p: np.ndarray, q: np.ndarray, draft_tokens, rng) -> list[int]:
    """The verification of ``speculative_generate`` with ``GreedyProcessor``'s argmax ``sample``."""
    draft_tokens = [int(t) for t in draft_tokens]
    gamma = len(draft_tokens)
    n = gamma
    for i, token in enumerate(draft_tokens):
        if rng.uniform() > p[i, token] / q[i, token]:
            n = i
            break
    p_p = p[gamma] if n == gamma else _max_fn(p[n] - q[n])
    return [*draft_tokens[:n], int(np.argmax(p_p))]


def drafter(model, prefix: Sequence[int], k: int, rng) -> tuple[list[int], np.ndarray]:
    """``GreedyProcessor`` on the drafter: proposes the argmax, stores the full softmax as q."""
    context, tokens = list(prefix), []
    rows = np.empty((k, model.vocab_size))
    for i in range(k):
        rows[i] = model.next_dist(context)
        tokens.append(int(np.argmax(rows[i])))
        context.append(tokens[-1])
    return tokens, rows
