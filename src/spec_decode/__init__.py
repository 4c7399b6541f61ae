"""spec-decode: exact speculative decoding, certified by running code.

``import spec_decode`` loads numpy only (no scipy, torch or transformers); ``spec_decode.audit``
is the auditor function, imported on first use because it needs scipy.
"""

from __future__ import annotations

from typing import Any

from spec_decode.core.generate import generate_autoregressive
from spec_decode.core.models import MarkovModel, Model, draft_from_target, random_markov, score
from spec_decode.core.processors import LogitBias, Penalties, ProcessedModel, TokenAutomaton
from spec_decode.core.protocols import Drafter, KPolicy
from spec_decode.core.randomness import NumpySource, RandomSource
from spec_decode.core.rules import Rule, exact_rule, residual
from spec_decode.core.sampling import SamplingParams
from spec_decode.core.trace import Step, Trace
from spec_decode.core.tree import TreeShape
from spec_decode.drafting.drafters import FallbackDrafter, ModelDrafter
from spec_decode.drafting.lookup import PromptLookupDrafter
from spec_decode.drafting.policies import CostModelK, FixedK, ScheduleK, policy_by_name
from spec_decode.drafting.speculative import generate_speculative, generate_tree

__all__ = [
    "CostModelK",
    "Drafter",
    "FallbackDrafter",
    "FixedK",
    "KPolicy",
    "LogitBias",
    "MarkovModel",
    "Model",
    "ModelDrafter",
    "NumpySource",
    "Penalties",
    "ProcessedModel",
    "PromptLookupDrafter",
    "RandomSource",
    "Rule",
    "SamplingParams",
    "ScheduleK",
    "Step",
    "TokenAutomaton",
    "Trace",
    "TreeShape",
    "audit",
    "draft_from_target",
    "exact_rule",
    "generate_autoregressive",
    "generate_speculative",
    "generate_tree",
    "policy_by_name",
    "random_markov",
    "residual",
    "score",
]


def __getattr__(name: str) -> Any:
    """``spec_decode.audit``: the auditor, loaded lazily (it needs scipy)."""
    if name == "audit":
        from spec_decode.certify.audit import audit

        return audit
    raise AttributeError(f"module 'spec_decode' has no attribute {name!r}")
