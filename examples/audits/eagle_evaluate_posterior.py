"""Adapter for SafeAILab/EAGLE ``eagle/model/utils.py`` (commit
cb7e0841fe0c206c6ed74a197ad5e2a1f13f5a2b): ``evaluate_posterior`` on a chain (one candidate per
depth) and the token ``update_inference_inputs`` draws after it, rewritten as a chain rule.

EAGLE proposes its candidates deterministically: the draft head's top-k tokens (a chain: its
most likely token), so it verifies each candidate as if its draft probability were 1
(``qx = 1.0``). Its two branches, chosen by the request's temperature:

* **greedy** (``logits_processor is None``, temperature <= 1e-5): a candidate is kept while it
  equals the argmax of the target's row; then the next token is the argmax of the target's row at
  the first mismatch (or of the last row after a full block);
* **sampling** (``logits_processor`` = temperature, top-p, top-k warpers): at each depth,
  ``r = random.random()`` and the candidate x is kept when ``r <= p(x) / 1``; otherwise
  ``p(x)`` is set to 0 and p renormalised, and that row is what the next token is drawn from
  (``torch.multinomial``). After a full block the next token is drawn from the target's last
  row. With q one-hot on x this is the exact rule (accept with p(x), else sample
  normalize(max(p - q, 0)) = p without x).

Here ``random.random()`` is ``rng.uniform()`` (only compared, so enumerated exactly),
``torch.multinomial`` is ``rng.categorical``, the rows the auditor passes stand for the processed
softmax, and the branch is selected through the ``sampling`` keyword (temperature 0 is greedy).
The arithmetic is float64: upstream runs in the loaded model's dtype (float16 by default), which
is a property of the model, not of this code.

Because ``evaluate_posterior`` ignores q, the faithful audit pairs it with ``drafter``, which, like
EAGLE's draft head on a chain, proposes the draft model's most likely token (and reports the
one-hot q it amounts to). The verification is exact whatever the proposal: given any candidate x,
keeping it with probability p(x) and otherwise drawing from p without x yields p. Fed tokens
sampled from q it stays exact, only accepting less often than min(1, p/q) would.

    spec-decode audit examples.audits.eagle_evaluate_posterior:rule \\
        --drafter examples.audits.eagle_evaluate_posterior:drafter
"""

from __future__ import annotations

import numpy as np

from spec_decode.certify.zoo import one_hot_drafter


def rule(p: np.ndarray, q: np.ndarray, draft_tokens, rng, sampling) -> list[int]:
    """``evaluate_posterior`` + the next-token draw of ``update_inference_inputs``, on a chain."""
    draft_tokens = [int(t) for t in draft_tokens]
    if sampling.greedy:
        emitted: list[int] = []
        for i, token in enumerate(draft_tokens):
            if token != int(np.argmax(p[i])):
                break
            emitted.append(token)
        return [*emitted, int(np.argmax(p[len(emitted)]))]
    accepted: list[int] = []
    for i, token in enumerate(draft_tokens):
        gtp = np.array(p[i], dtype=float)
        if rng.uniform() <= gtp[token] / 1.0:
            accepted.append(token)
            continue
        gtp[token] = 0.0
        return [*accepted, rng.categorical(gtp / gtp.sum())]
    return [*accepted, rng.categorical(p[len(draft_tokens)])]


#: EAGLE's chain proposal, the draft's most likely token at each depth with a one-hot q:
#: the zoo's ``one_hot_drafter`` (a control: exact with an exact rule).
drafter = one_hot_drafter
