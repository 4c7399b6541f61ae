"""A broken-on-purpose drafter wrapper shared by the deterministic drafters' tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest

from spec_decode.core.models import Model
from spec_decode.core.protocols import Drafter


@dataclass(frozen=True)
class ReportsModelQ:
    """BROKEN on purpose: ``inner``'s deterministic proposal reported with the draft model's rows
    as q, as if the tokens had been sampled from them (the honest report is one-hot)."""

    inner: Drafter
    draft: Model

    @property
    def vocab_size(self) -> int:
        return self.draft.vocab_size

    def propose(self, prefix: Sequence[int], k: int, rng: object) -> tuple[list[int], np.ndarray]:
        tokens, _ = self.inner.propose(prefix, k, rng)
        rows = [self.draft.next_dist([*prefix, *tokens[:i]]) for i in range(len(tokens))]
        return tokens, np.reshape(rows, (len(tokens), self.vocab_size))

    def propose_tokens(self, prefix: Sequence[int], k: int) -> list[int]:
        return self.inner.propose_tokens(prefix, k)


@pytest.fixture
def reports_model_q() -> type[ReportsModelQ]:
    """The broken wrapper class: ``reports_model_q(inner_drafter, draft_model)``."""
    return ReportsModelQ
