"""spec-decode: exact speculative decoding, certified by running code."""

from spec_decode.drafters import Drafter, ModelDrafter
from spec_decode.models import MarkovModel, Model, draft_from_target, random_markov, score
from spec_decode.randomness import NumpySource, RandomSource
from spec_decode.rules import Rule, exact_rule, residual
from spec_decode.sampling import SamplingParams
from spec_decode.speculative import Trace, generate_autoregressive, generate_speculative

__all__ = [
    "Drafter",
    "MarkovModel",
    "Model",
    "ModelDrafter",
    "NumpySource",
    "RandomSource",
    "Rule",
    "SamplingParams",
    "Trace",
    "draft_from_target",
    "exact_rule",
    "generate_autoregressive",
    "generate_speculative",
    "random_markov",
    "residual",
    "score",
]
