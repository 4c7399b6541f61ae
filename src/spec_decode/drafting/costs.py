"""What a step costs on one machine: a target pass by the number of tokens it scores, and a draft
token.

On a CPU, verification is compute-bound and a pass over n tokens costs far more than one token;
on a GPU the curve is nearly flat for short blocks (BENCHMARKS.md, "Cost curve and block/one-token
agreement"). A policy that assumes a flat curve drafts too much on a CPU, so the auto policy
(:mod:`spec_decode.drafting.auto`) reads this curve, measured by
:mod:`spec_decode.backends.calibration`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np


@dataclass(frozen=True)
class CostCurve:
    """Seconds of one target pass by tokens scored, and seconds per drafted token.

    ``sizes`` are the measured block lengths (strictly increasing, from 1), ``seconds`` the pass
    time at each; ``draft_seconds`` is one draft-model token (``None`` without a draft model).
    The measured times are used as they are, dips included: a longer pass can be cheaper than a
    shorter one (on a CPU, llama.cpp's batch kernels work in tiles of 8 or 16 rows, and a block
    of 16 tokens costs less than one of 12 or 17), and the auto policy should then choose it.
    Calibration measures a disturbed curve again and keeps the quietest attempt
    (:mod:`spec_decode.backends.calibration`), so a dip that remains is most likely the
    machine's. Between measured sizes the cost is interpolated linearly,
    beyond the largest it grows at the mean slope of the upper half of the measurements (never
    negative).
    """

    sizes: tuple[int, ...]
    seconds: tuple[float, ...]
    draft_seconds: float | None = None
    _table: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        sizes, seconds = tuple(int(n) for n in self.sizes), tuple(float(s) for s in self.seconds)
        object.__setattr__(self, "sizes", sizes)
        object.__setattr__(self, "seconds", seconds)
        if not sizes or len(sizes) != len(seconds):
            raise ValueError(
                f"need one time per size and at least one, got {len(sizes)} sizes and "
                f"{len(seconds)} times"
            )
        if sizes[0] != 1 or any(b <= a for a, b in pairwise(sizes)):
            raise ValueError(f"sizes must increase strictly from 1, got {list(sizes)}")
        if not all(math.isfinite(s) and s > 0 for s in seconds):
            raise ValueError(f"pass times must be finite and > 0, got {list(seconds)}")
        draft = self.draft_seconds
        if draft is not None and not (math.isfinite(draft) and draft >= 0):
            raise ValueError(f"draft_seconds must be finite and >= 0, got {draft}")
        # made once: the planners read the curve for every option of every step, at whole
        # numbers of tokens, so each is interpolated here (index n - 1) and looked up there
        whole = np.interp(np.arange(1, sizes[-1] + 1), sizes, seconds)
        object.__setattr__(self, "_table", tuple(float(s) for s in whole))

    @classmethod
    def from_passes(cls, seconds: Sequence[float], draft_seconds: float | None = None) -> CostCurve:
        """The curve measured at every block length 1..len(seconds)."""
        return cls(tuple(range(1, len(seconds) + 1)), tuple(seconds), draft_seconds)

    def target(self, n_tokens: int) -> float:
        """Seconds of one target pass scoring ``n_tokens`` tokens (the last committed one plus
        the drafts)."""
        if n_tokens < 1:
            raise ValueError(f"a target pass scores at least 1 token, got {n_tokens}")
        last = self.sizes[-1]
        if n_tokens <= last:
            return self._table[n_tokens - 1]
        if len(self.sizes) == 1:
            slope = self.seconds[0]  # one point: assume cost proportional to tokens
        else:
            half = (len(self.sizes) - 1) // 2
            slope = (self.seconds[-1] - self.seconds[half]) / (last - self.sizes[half])
        return self.seconds[-1] + max(slope, 0.0) * (n_tokens - last)

    def relative(self, n_tokens: int) -> float:
        """A pass over ``n_tokens`` tokens in units of a one-token pass."""
        return self.target(n_tokens) / self.target(1)
