"""What decodes one request: its models with its processors around them, and its step function,
the one place that chooses between target-only decoding, the auto policy, a token tree and a
chain."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spec_decode.constraints.grammar import GrammarMask
from spec_decode.core.processors import Processor, with_processors
from spec_decode.core.steps import ONLY, PolicyPlanner, StepFunction, target_step, tree_step
from spec_decode.drafting.auto import AutoPlanner
from spec_decode.drafting.drafters import ModelDrafter
from spec_decode.drafting.lookup import PromptLookupDrafter
from spec_decode.drafting.policies import policy_by_name
from spec_decode.serving.config import NO_DRAFT, EngineConfig
from spec_decode.serving.request import RequestOptions

#: Builds a request's auto planner around its draft-model drafter (None: no draft model).
AutoFactory = Callable[[ModelDrafter | None], AutoPlanner]


def processed(
    model: Any, options: RequestOptions, start: int, grammar_tokenizer: Any = None
) -> Any:
    """``model`` with the request's penalties, logit bias and grammar (read through
    ``grammar_tokenizer``), each row's history read from ``start``, the end of its prompt
    (``model`` itself when the request has none)."""
    processors: list[Processor] = [options.penalties]
    if options.logit_bias is not None:
        processors.append(options.logit_bias)
    if options.grammar is not None:
        processors.append(GrammarMask(options.grammar, grammar_tokenizer))
    return with_processors(model, processors, start)


def request_step(
    config: EngineConfig,
    options: RequestOptions,
    target: Any,
    draft: Any,
    k: int,
    auto: AutoFactory | None = None,
) -> StepFunction:
    """The step function of one request decoded as ``options`` say, scoring with ``target``
    (the target model, or a recorder around it) and drafting with ``draft`` (the draft model or
    None, both with the request's processors), at most ``k`` drafted tokens a step. The auto
    policy's planner comes from ``auto``: the engine's cost curve, suffix drafter and step
    board are its to give."""
    choice, sampling = config.rule_for(options), options.sampling
    if options.target_only or config.draft == NO_DRAFT:
        return target_step(target, sampling)
    model = None if draft is None else choice.model_drafter(draft, sampling, config.confidence)
    if config.uses_auto:
        if auto is None:
            raise ValueError("the auto policy needs the engine's cost curve and suffix drafter")
        planner = auto(model)
        return choice.planned_step(target, planner.drafters, planner, sampling)
    if config.tree is not None:
        drafter = choice.tree_drafter(draft, sampling)
        return tree_step(target, drafter, config.tree, choice.tree, sampling)
    chain = model or PromptLookupDrafter(target.vocab_size, max_tokens=k)  # k, not its 10
    planner = PolicyPlanner(policy_by_name(config.policy, k))
    return choice.planned_step(target, {ONLY: chain}, planner, sampling)
