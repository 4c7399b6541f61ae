"""Processors applied wrongly under speculation: a penalty, a mask or a bias that verification
reads from the wrong history, or not at all. Each is a target whose one-token rows are processed
correctly (target-only decoding is right) but whose block rows are not; every certificate must
FAIL them against the correctly processed target
(:class:`~spec_decode.core.processors.ProcessedModel`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spec_decode.core.models import score
from spec_decode.core.processors import ProcessedModel


class CommittedPrefixOnly(ProcessedModel):
    """Every row of a drafted block processed with the committed tokens alone, as if the drafts
    before it were not there: the repetition penalty of vLLM #22987, whose counts do not include
    the drafts a row follows, so a drafted repeat goes unpenalised inside the block."""

    def score(self, prefix: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        rows = score(self.model, prefix, tokens)
        return self.processed(prefix, [()] * len(rows), rows)


class DraftsUnprocessed(ProcessedModel):
    """The block's first row processed, the rows after a draft left raw: a grammar mask skipped
    inside the draft (vLLM #36138), so a draft the grammar forbids can be accepted."""

    def score(self, prefix: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        rows = score(self.model, prefix, tokens)
        rows[:1] = self.processed(prefix, [()], rows[:1])
        return rows


class VerificationUnprocessed(ProcessedModel):
    """Plain passes processed, verified blocks raw: min_p and logit_bias not applied when drafts
    are verified (vLLM #42744), so the bias holds only on the steps that drafted nothing."""

    def score(self, prefix: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        if not tokens:
            return super().score(prefix, tokens)
        return score(self.model, prefix, tokens)
