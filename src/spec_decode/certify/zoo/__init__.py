"""The zoo: re-created exactness bugs that shipped in real engines, and exact controls.

Each broken entry re-creates one mechanism and its docstring says what it does to the output;
``spec-decode audit --zoo`` must FAIL every one (``BROKEN_RULES``, ``BROKEN_DRAFTERS``) and PASS
the controls that are exact and often wrongly suspected (``EXACT_RULES``, ``EXACT_DRAFTERS``).
Audit one by name, e.g. ``spec-decode audit zoo:inverted_ratio``. Broken tree code
lives in :mod:`spec_decode.certify.zoo.trees`.
"""

from spec_decode.certify.zoo.drafters import (
    DRAW_CUT_OFF,
    argmax_drafter,
    confidence_after_draw,
    lookup_with_model_q,
    one_hot_drafter,
    truncated_drafter,
)
from spec_decode.certify.zoo.rules import (
    bonus_from_draft,
    exact_up_to_three,
    greedy_accepts_all,
    inverted_ratio,
    resample_from_target,
    retempered_target,
    sample_match,
    swapped_residual,
    typical_acceptance,
    unnormalised_residual,
)
from spec_decode.certify.zoo.trees import UnadjustedTreeDrafter, tree_without_residual_update
from spec_decode.certify.zoo.uniform_rules import float32_rule, shared_uniform, uniform_rule
from spec_decode.core.rules import exact_rule

#: Broken rules and drafters (the auditor must FAIL each), by name.
BROKEN_RULES = {
    "resample_from_target": resample_from_target,
    "swapped_residual": swapped_residual,
    "unnormalised_residual": unnormalised_residual,
    "inverted_ratio": inverted_ratio,
    "bonus_from_draft": bonus_from_draft,
    "retempered_target": retempered_target,
    "typical_acceptance": typical_acceptance,
    "exact_up_to_three": exact_up_to_three,
    "shared_uniform": shared_uniform,
    "greedy_accepts_all": greedy_accepts_all,
}
BROKEN_DRAFTERS = {
    "argmax_drafter": argmax_drafter,
    "truncated_drafter": truncated_drafter,
    "lookup_with_model_q": lookup_with_model_q,
    "confidence_after_draw": confidence_after_draw,
}
#: Exact controls (the auditor must PASS each), by name.
EXACT_RULES = {"exact_rule": exact_rule, "sample_match": sample_match, "uniform_rule": uniform_rule}
#: Unbiased but rounded (float32): FAIL at the default tolerance, PASS with ``tolerance=1e-6``.
ROUNDING_RULES = {"float32_rule": float32_rule}
EXACT_DRAFTERS = {"one_hot_drafter": one_hot_drafter}

__all__ = [
    "BROKEN_DRAFTERS",
    "BROKEN_RULES",
    "DRAW_CUT_OFF",
    "EXACT_DRAFTERS",
    "EXACT_RULES",
    "ROUNDING_RULES",
    "UnadjustedTreeDrafter",
    "argmax_drafter",
    "bonus_from_draft",
    "confidence_after_draw",
    "exact_rule",
    "exact_up_to_three",
    "float32_rule",
    "greedy_accepts_all",
    "inverted_ratio",
    "lookup_with_model_q",
    "one_hot_drafter",
    "resample_from_target",
    "retempered_target",
    "sample_match",
    "shared_uniform",
    "swapped_residual",
    "tree_without_residual_update",
    "truncated_drafter",
    "typical_acceptance",
    "uniform_rule",
    "unnormalised_residual",
]
