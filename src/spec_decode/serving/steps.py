"""What decodes one request: the models with the request's processors around them, and the step
function the engine's configuration calls for (target-only, auto, a token tree or a chain)."""

from __future__ import annotations

from typing import Any

from spec_decode.constraints.grammar import GrammarMask
from spec_decode.core.processors import Processor, with_processors
from spec_decode.core.sampling import SamplingParams
from spec_decode.core.steps import ONLY, PolicyPlanner, StepFunction, target_step, tree_step
from spec_decode.drafting.auto import auto_planner
from spec_decode.drafting.costs import CostCurve
from spec_decode.drafting.lookup import PromptLookupDrafter
from spec_decode.drafting.policies import policy_by_name
from spec_decode.drafting.rule_choice import RuleChoice
from spec_decode.drafting.suffix import SuffixDrafter
from spec_decode.serving.config import NO_DRAFT, EngineConfig
from spec_decode.serving.request import GenerationRequest


def processed(model: Any, request: GenerationRequest, grammar_tokenizer: Any = None) -> Any:
    """``model`` with the request's penalties, logit bias and grammar (read through
    ``grammar_tokenizer``), each row's history read from the end of its prompt (``model``
    itself when the request has none)."""
    processors: list[Processor] = [request.penalties]
    if request.logit_bias is not None:
        processors.append(request.logit_bias)
    if request.grammar is not None:
        processors.append(GrammarMask(request.grammar, grammar_tokenizer))
    return with_processors(model, processors, len(request.prompt))


def request_step(
    config: EngineConfig,
    target: Any,
    draft: Any,
    sampling: SamplingParams,
    *,
    choice: RuleChoice,
    k: int,
    target_only: bool = False,
    costs: CostCurve | None = None,
    suffix: SuffixDrafter | None = None,
) -> StepFunction:
    """The step function of one request, scoring with ``target`` (the target model, or a
    recorder around it) and drafting with ``draft`` (the draft model or None, both with the
    request's processors), at most ``k`` drafted tokens a step. Auto needs the engine's
    ``costs`` and its kept ``suffix`` drafter."""
    if target_only or config.draft == NO_DRAFT:
        return target_step(target, sampling)
    if config.uses_auto:
        if costs is None or suffix is None:
            raise ValueError("the auto policy needs the cost curve and the suffix drafter")
        model = choice.model_drafter(draft, sampling, config.confidence) if draft else None
        planner = auto_planner(costs, target.vocab_size, model, k, suffix.history, suffix=suffix)
        return choice.planned_step(target, planner.drafters, planner, sampling)
    if config.tree is not None:
        drafter = choice.tree_drafter(draft, sampling)
        return tree_step(target, drafter, config.tree, choice.tree, sampling)
    if draft is None:
        chain = PromptLookupDrafter(target.vocab_size, max_tokens=k)  # k, not its 10
    else:
        chain = choice.model_drafter(draft, sampling, config.confidence)
    planner = PolicyPlanner(policy_by_name(config.policy, k))
    return choice.planned_step(target, {ONLY: chain}, planner, sampling)
