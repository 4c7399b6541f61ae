"""The cost curves, planner and hand-built traces the auto policy's tests share (a module beside
them, not a test file)."""

from __future__ import annotations

from spec_decode import Trace
from spec_decode.core.models import Model
from spec_decode.core.protocols import Drafter
from spec_decode.core.trace import Step
from spec_decode.drafting.auto import AutoPlanner
from spec_decode.drafting.costs import CostCurve
from spec_decode.drafting.drafters import ModelDrafter
from spec_decode.drafting.lookup import PromptLookupDrafter
from spec_decode.drafting.suffix import SuffixDrafter

#: This CPU's llama.cpp curve (shared/README.md): 1 token 30 ms ... 17 tokens 225 ms; draft 19 ms.
CPU = CostCurve((1, 2, 3, 5, 9, 17), (0.030, 0.0465, 0.063, 0.099, 0.180, 0.225), 0.019)
#: A GPU-like curve: a pass costs the same up to 17 tokens, a draft token a tenth of it.
FLAT = CostCurve((1, 17), (0.010, 0.010), 0.001)
REPEATING = [1, 2, 3, 1, 2, 3, 1, 2]  # lookup and suffix both propose "3 1 2 ..."
FRESH = [0, 1, 2, 3, 4, 5]  # nothing recurs


def planner(costs: CostCurve, draft: Model | None = None, **options) -> AutoPlanner:
    drafters: dict[str, Drafter] = {
        "lookup": PromptLookupDrafter(8, max_ngram=2),
        "suffix": SuffixDrafter(8, max_match=3, min_probability=0.0),
    }
    if draft is not None:
        drafters["draft"] = ModelDrafter(draft)
    return AutoPlanner(costs, drafters, "draft" if draft is not None else None, **options)


def history(*steps: tuple[str, int, int]) -> Trace:
    """A trace of (drafter, drafted, accepted) steps."""
    trace = Trace()
    for name, drafted, accepted in steps:
        trace.record(Step([0] * (accepted + 1), drafted, accepted, drafted, drafter=name))
    return trace


def watched(emitted: list[int], proposal_length: int, right: bool) -> Trace:
    """Plain passes emitting ``emitted`` one token each, while lookup and suffix proposed the
    next ``proposal_length`` tokens (``right``) or something else (wrong from the first)."""
    trace = Trace()
    for i, token in enumerate(emitted):
        ahead = emitted[i : i + proposal_length] if right else [7] * proposal_length
        trace.record(Step([token], proposals={"lookup": ahead, "suffix": ahead}))
    return trace
