"""What the benchmarks' tests share: importing a benchmark's module with the repository root on
``sys.path`` (``bench.lib``), for one test."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bench_module(monkeypatch) -> Callable[[str], ModuleType]:
    """``importlib.import_module``, the repository root on ``sys.path`` (restored after)."""
    monkeypatch.syspath_prepend(str(ROOT))
    return importlib.import_module
