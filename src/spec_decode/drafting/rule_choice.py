"""A verification rule chosen by name, with everything that has to agree with it.

The coupled rule (:mod:`spec_decode.core.coupled`) is more than a rule: the random source must
give positional noise, and the model drafters must draw with that noise, or the drafts are
accepted only by chance. :class:`RuleChoice` builds the four together, so a command line or a
server cannot combine them wrongly: the chain rule, the tree rule, the model drafters and the
random source of a run (every run, target-only included, so ``--compare`` compares outputs
under the same noise). Which step a request runs is chosen in one place,
:func:`spec_decode.serving.steps.request_step`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from spec_decode.core.coupled import coupled_rule, coupled_tree_rule
from spec_decode.core.models import Model
from spec_decode.core.noise import positional_source
from spec_decode.core.protocols import Drafter, Planner
from spec_decode.core.randomness import RandomSource
from spec_decode.core.rules import Rule, exact_rule
from spec_decode.core.sampling import SamplingParams
from spec_decode.core.steps import (
    StepFunction,
    greedy_step,
    planned_step,
)
from spec_decode.core.tree_rules import TreeRule, verify_tree
from spec_decode.drafting.drafters import ModelDrafter
from spec_decode.drafting.tree_drafters import ModelTreeDrafter

#: The rules by name: coupled (seed-identical to target-only decoding) and standard
#: (Leviathan et al. / Chen et al.).
RULE_NAMES = ("coupled", "standard")
#: The rule of ``generate`` and of a server when none is named: coupled, since it loses no
#: acceptance on the one-hot drafts the auto policy takes on a CPU and little on a draft model
#: (BENCHMARKS.md), and makes every run's output target-only decoding's for its seed, visibly
#: (``generate --compare``). The toy commands keep the standard rule unless told.
DEFAULT_RULE = "coupled"


@dataclass(frozen=True)
class RuleChoice:
    """The rule named ``name`` and what must agree with it."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in RULE_NAMES:
            raise ValueError(f"rule must be one of {', '.join(RULE_NAMES)}, got {self.name!r}")

    @property
    def coupled(self) -> bool:
        return self.name == "coupled"

    @property
    def chain(self) -> Rule:
        return coupled_rule if self.coupled else exact_rule

    @property
    def tree(self) -> TreeRule:
        return coupled_tree_rule if self.coupled else verify_tree

    def source(self, seed: int | None) -> np.random.Generator | RandomSource:
        """A fresh random source for one run with ``seed`` (positional noise when coupled;
        ``None``: a fresh seed)."""
        if not self.coupled:
            return np.random.default_rng(seed)
        return positional_source(np.random.default_rng() if seed is None else seed)

    def model_drafter(
        self, model: Model, sampling: SamplingParams, min_confidence: float = 0.0
    ) -> ModelDrafter:
        return ModelDrafter(model, sampling, min_confidence, coupled=self.coupled)

    def tree_drafter(
        self, model: Model, sampling: SamplingParams, replacement: bool = False
    ) -> ModelTreeDrafter:
        return ModelTreeDrafter(model, sampling, replacement, coupled=self.coupled)

    def planned_step(
        self,
        target: Model,
        drafters: Mapping[str, Drafter],
        planner: Planner,
        sampling: SamplingParams,
    ) -> StepFunction:
        """The chain step under this rule, ``planner`` choosing the drafter and k: under greedy
        controls on the target's top tokens alone (:func:`~spec_decode.core.steps.greedy_step`:
        both rules reduce to it), else verified by the rule on the warped rows."""
        if sampling.greedy:
            return greedy_step(target, drafters, planner)
        return planned_step(target, drafters, planner, self.chain, sampling)


def rule_by_name(name: str) -> RuleChoice:
    """The :class:`RuleChoice` named ``name`` (one of :data:`RULE_NAMES`)."""
    return RuleChoice(name)
