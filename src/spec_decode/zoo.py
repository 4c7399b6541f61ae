"""Short path for ``spec-decode audit spec_decode.zoo:NAME``: the zoo lives in
:mod:`spec_decode.certify.zoo`."""

from spec_decode.certify.zoo import *  # noqa: F403
from spec_decode.certify.zoo import __all__  # noqa: F401
