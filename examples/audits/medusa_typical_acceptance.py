"""Adapter for FasterDecoding/Medusa ``medusa/model/utils.py`` (commit
e2a5d20c048a9b0a4092e6933c34313687422518): ``evaluate_posterior`` with its default typical
acceptance, and the token ``generate_candidates`` takes after it, rewritten as a chain rule.

Medusa's candidates are the Medusa heads' top-k tokens (a chain: each head's most likely token),
and ``medusa_generate`` calls ``evaluate_posterior`` with ``sampling='typical'``, ``fast=True``,
``posterior_threshold=0.09``, ``posterior_alpha=0.3``. Per step:

* **greedy** (temperature 0): a candidate is kept while it equals the argmax of the target's row;
* **typical acceptance** (temperature > 0): with ``P = softmax(logits / temperature)`` at each
  drafted position, the entropy ``H = -sum P log(P + 1e-5)`` and the threshold
  ``min(0.09, 0.3 exp(-H))``, a candidate x is kept while ``P(x) > threshold`` (a prefix, through
  ``cumprod``). There is no random draw and no residual: acceptance is a fixed function of the
  target's row;
* the token after the kept candidates comes from the next step's ``generate_candidates`` on the
  target's row at the first unkept position (or after the block): with ``temperature == 0 or
  fast`` it is that row's argmax. With the default ``fast=True`` that holds at every
  temperature, so the whole step is deterministic given the candidates.

Inexact by design (Medusa trades fidelity for acceptance): it keeps any token above a plausibility
threshold and replaces the sampled next token by the most likely one. (``fast=False`` is not
modelled: at this commit it calls ``get_typical_posterior_mask`` with one argument too many and
raises ``TypeError``.) Here the rows the auditor passes stand for P (the case's warps applied),
the branch is selected through the ``sampling`` keyword, and the arithmetic is float64 (upstream
runs in the model's dtype). ``drafter`` proposes the draft model's most likely token at each
depth, as a Medusa head's top-1 does, and reports the one-hot q it amounts to; the rule ignores q.

    spec-decode audit examples.audits.medusa_typical_acceptance:rule \\
        --drafter examples.audits.medusa_typical_acceptance:drafter
"""

from __future__ import annotations

import numpy as np

from spec_decode.certify.zoo import one_hot_drafter

#: ``medusa_generate``'s defaults.
POSTERIOR_THRESHOLD = 0.09
POSTERIOR_ALPHA = 0.3


def _typical(row: np.ndarray, token: int) -> bool:
    """Whether typical acceptance keeps ``token`` on the target's (temperature-scaled) row."""
    entropy = -float(np.sum(row * np.log(row + 1e-5)))
    threshold = min(POSTERIOR_THRESHOLD, float(np.exp(-entropy)) * POSTERIOR_ALPHA)
    return bool(row[token] > threshold)


def rule(p: np.ndarray, q: np.ndarray, draft_tokens, rng, sampling) -> list[int]:
    """Typical acceptance (``fast=True``), then the argmax of the target's next row."""
    keep = (lambda row, x: x == int(np.argmax(row))) if sampling.greedy else _typical
    emitted: list[int] = []
    for i, token in enumerate(int(t) for t in draft_tokens):
        if not keep(p[i], token):
            break
        emitted.append(token)
    return [*emitted, int(np.argmax(p[len(emitted)]))]


#: A Medusa head's top-1 at each depth: the draft's most likely token, with a one-hot q:
#: the zoo's ``one_hot_drafter`` (a control: exact with an exact rule).
drafter = one_hot_drafter
