"""Short path for ``spec-decode audit spec_decode.transformers_rule:NAME``: the wrappers live in
:mod:`spec_decode.certify.third_party.transformers_rule`."""

from spec_decode.certify.third_party.transformers_rule import (
    hf_ensemble_verification,
    hf_speculative_sampling,
)

__all__ = ["hf_ensemble_verification", "hf_speculative_sampling"]
