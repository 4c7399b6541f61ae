"""The record of one timed run, ours or Hugging Face's, with the same keys for both so that the
summaries compare them directly."""

from __future__ import annotations

from spec_decode.core.trace import Trace

#: One timed run's record: at least "generated" (how many tokens it generated) and "seconds";
#: "tokens", the ids, where the engine reports them (servers and llama.cpp's tools give counts).
RunRecord = dict[str, object]


def trace_record(trace: Trace, seconds: float) -> dict[str, object]:
    """The record of one of our runs: tokens, wall seconds and the trace's exact counts
    (acceptance None when nothing was drafted)."""
    return {
        "tokens": trace.tokens,
        "generated": len(trace.tokens),
        "seconds": seconds,
        "target_passes": trace.target_passes,
        "draft_calls": trace.draft_calls,
        "acceptance_rate": trace.acceptance_rate if trace.proposed else None,
        "tokens_per_pass": trace.tokens_per_pass,
    }


def hf_record(
    tokens: list[int], seconds: float, passes: int, draft_calls: int
) -> dict[str, object]:
    """The record of one Hugging Face ``generate`` run, counted like ours (its forward calls
    read by hooks; acceptance is not reported by transformers)."""
    return {
        "tokens": tokens,
        "generated": len(tokens),
        "seconds": seconds,
        "target_passes": passes,
        "draft_calls": draft_calls,
        "acceptance_rate": None,
        "tokens_per_pass": len(tokens) / passes if passes else None,
    }
