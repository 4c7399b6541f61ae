"""Which parameter sets run in the fast tier (``pytest -m "not slow"``): a test's cheapest
representative ones; the full suite runs them all."""

from __future__ import annotations

from collections.abc import Iterable

import pytest


def fast_only(values: Iterable[object], fast: Iterable[object]) -> list[object]:
    """``values`` as parameters, every one not in ``fast`` marked slow."""
    keep = list(fast)
    return [v if v in keep else pytest.param(v, marks=pytest.mark.slow) for v in values]
