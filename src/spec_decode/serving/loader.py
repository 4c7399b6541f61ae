"""Loading an engine's models: the target (as slots), the cost curve, and the draft where it
can pay and fits the target's vocabulary."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from spec_decode.backends.calibration import cost_curve, pass_seconds
from spec_decode.backends.loading import Loaded, check_pair
from spec_decode.drafting.auto import draft_model_can_pay
from spec_decode.drafting.costs import CostCurve
from spec_decode.serving.config import LOOKUP, NO_DRAFT, EngineConfig, default_k, draft_may_pay


@dataclass(frozen=True)
class LoadedModels:
    """What an engine runs on: the configuration as loaded (a draft set aside becomes
    prompt drafting), the models, the cost curve, the most tokens a step drafts, and notes."""

    config: EngineConfig
    target: Loaded
    draft: Loaded | None
    costs: CostCurve | None
    k: int
    notes: tuple[str, ...] = ()


def load_models(config: EngineConfig) -> LoadedModels:
    """Load the target, read (or measure) the cost curve, and load the draft model unless the
    auto policy could never choose it on this machine, judged from its cached cost before
    loading and from its cost measured after (``ValueError`` or ``FileNotFoundError`` for a bad
    model or combination). A draft kept would cost every step the planning of its options."""
    backend = config.checked_backend()
    slots = config.parallel if backend == "llama.cpp" and config.tree is None else 1
    target = config.load(backend, config.target, config.target_weights, slots)
    costs = cost_curve(backend, target.model) if config.uses_auto else None
    k = config.k or default_k(target.model, config.uses_auto)
    wants_model, notes = config.draft not in (LOOKUP, NO_DRAFT), ()
    if wants_model and costs is not None:
        wants_model = draft_may_pay(backend, config.draft, config.threads, costs, k)
    draft = None
    if wants_model:
        draft = config.load(backend, config.draft, config.draft_weights, slots, draft=True)
        draft, config, notes = _fitting_draft(config, target, draft)
    if draft is not None and costs is not None:
        seconds = pass_seconds(backend, draft.model, max_block=1)[0][0]
        if draft_model_can_pay(costs, seconds, k):
            costs = dataclasses.replace(costs, draft_seconds=seconds)
        else:  # measured now (the cached cost was not believed): set aside, as if never loaded
            _close(draft)
            draft = None
    return LoadedModels(config, target, draft, costs, k, notes)


def _close(draft: Loaded) -> None:
    """Free the draft's llama.cpp contexts (one per distinct model object of its slots)."""
    for model in {id(m): m for m in draft.slots}.values():
        getattr(model, "close", lambda: None)()


def _fitting_draft(
    config: EngineConfig, target: Loaded, draft: Loaded
) -> tuple[Loaded | None, EngineConfig, tuple[str, ...]]:
    """``draft`` if it shares the target's vocabulary; else, unless the user named it (then the
    ``ValueError`` stands), no draft, drafting from the prompt, and a note saying why."""
    try:
        check_pair(target, draft)
    except ValueError as error:
        if config.draft_named:
            raise
        _close(draft)
        note = f"draft {config.draft} not used ({error}); drafting from the prompt instead"
        return None, dataclasses.replace(config, draft=LOOKUP), (note,)
    return draft, config, ()
