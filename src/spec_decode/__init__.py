"""spec-decode: exact speculative decoding, certified by running code."""

from spec_decode.drafters import Drafter, FallbackDrafter, ModelDrafter
from spec_decode.lookup import PromptLookupDrafter
from spec_decode.models import MarkovModel, Model, draft_from_target, random_markov, score
from spec_decode.policies import CostModelK, FixedK, KPolicy, ScheduleK, policy_by_name
from spec_decode.randomness import NumpySource, RandomSource
from spec_decode.rules import Rule, exact_rule, residual
from spec_decode.sampling import SamplingParams
from spec_decode.speculative import Trace, generate_autoregressive, generate_speculative

__all__ = [
    "CostModelK",
    "Drafter",
    "FallbackDrafter",
    "FixedK",
    "KPolicy",
    "MarkovModel",
    "Model",
    "ModelDrafter",
    "NumpySource",
    "PromptLookupDrafter",
    "RandomSource",
    "Rule",
    "SamplingParams",
    "ScheduleK",
    "Trace",
    "draft_from_target",
    "exact_rule",
    "generate_autoregressive",
    "generate_speculative",
    "policy_by_name",
    "random_markov",
    "residual",
    "score",
]
