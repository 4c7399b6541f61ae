"""What one generation gives back: its tokens and text, why it ended, what drafting did (the
figures ``usage.speculative`` reports) and where its time went."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spec_decode.core.trace import Trace
from spec_decode.serving.logprobs import TokenLogprob

#: Why a generation ended: an end-of-generation token or a stop string, the token limit, or
#: the caller's cancellation.
FINISH_REASONS = ("stop", "length", "cancelled")


@dataclass(frozen=True)
class Piece:
    """What one step gave: the tokens it emitted, the text that became final (the last piece
    of a generation comes with no tokens) and, when asked for, the tokens' log-probabilities."""

    tokens: list[int]
    text: str
    logprobs: list[TokenLogprob] | None = None


#: Called after every step with its :class:`Piece`.
StepCallback = Callable[[Piece], None]


@dataclass
class Completion:
    """One finished generation.

    ``tokens`` are every emitted token (an end-of-generation token included); ``text`` their
    text, cut before a stop string; ``finish_reason`` one of :data:`FINISH_REASONS`;
    ``cached_tokens`` how many prompt tokens were not read again: held in its slot's KV cache from
    an earlier request, or copied from a running request's (:mod:`.slots`);
    ``seconds`` the generation's wall time, ``first_step_seconds`` that of its first step (the
    prompt read plus one target pass; 0 when none ran); ``logprobs`` one entry per token when
    the request asked for them; ``end_token`` whether an end-of-generation token ended it (a
    request that ignores them never ends on one).
    """

    tokens: list[int]
    text: str
    finish_reason: str
    prompt_tokens: int
    cached_tokens: int
    trace: Trace
    seconds: float
    first_step_seconds: float = 0.0
    logprobs: list[TokenLogprob] | None = None
    end_token: bool = False

    def figures(self) -> dict[str, object]:
        """Every reported figure of this generation, for JSON output."""
        trace = self.trace
        return {
            "text": self.text,
            "token_ids": trace.tokens,
            "tokens": len(trace.tokens),
            "finish_reason": self.finish_reason,
            "seconds": self.seconds,
            "tokens_per_second": len(trace.tokens) / self.seconds if self.seconds else 0.0,
            **speculative_figures(trace),
        }


def speculative_figures(trace: Trace) -> dict[str, Any]:
    """What drafting did in one generation: target passes (plain ones apart), drafted and
    accepted tokens, acceptance rate, tokens per pass, steps by drafter ("": a plain target pass)
    and the drafted blocks by length. A ratio with nothing to divide by (nothing drafted, no
    pass) is None, which JSON can carry."""
    blocks = Counter(length for length in trace.drafted_lengths if length)
    return {
        "target_passes": trace.target_passes,
        "plain_passes": trace.target_passes - sum(blocks.values()),
        "blocks_by_length": {str(length): count for length, count in sorted(blocks.items())},
        "proposed": trace.proposed,
        "accepted": trace.accepted,
        "acceptance_rate": trace.acceptance_rate if trace.proposed else None,
        "tokens_per_pass": trace.tokens_per_pass if trace.target_passes else None,
        "steps_by_drafter": dict(Counter(trace.drafter_names)),
    }
