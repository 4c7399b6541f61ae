"""Every adapter in ``examples/audits/`` keeps its verdict (AUDITS.md, "Public engines"), on a few
cheap cases of the audit grid that hold a failing case for each FAIL adapter; and romsto's
``GreedyProcessor`` emits the wrong token with probability 1/3 on p = [.6, .4], q = [.9, .1]."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
from pathlib import Path

import numpy as np
import pytest

from spec_decode.certify.audit import audit
from spec_decode.certify.enumeration import enumerate_outputs
from spec_decode.certify.grid import audit_cases

#: Slow: every adapter is audited over five cases.
pytestmark = pytest.mark.slow

# ``examples`` lives at the repository root, which pytest does not put on the path by itself.
ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

#: Peaked V=2 k=1 plain; sparse V=4 k=2 greedy; draft zero where target positive V=4 k=1 plain
#: (every FAIL adapter fails there) and V=3 k=3 top-p 0.8; sparse V=6 k=1 temperature 0.7 top-k 2.
CASES = [audit_cases(0)[i] for i in (0, 5, 8, 9, 18)]

#: (module, rule, drafter or None, tolerance, verdict); float32 code is judged at 1e-6.
ADAPTERS = [
    ("jaymody_speculative_sampling", "rule", None, 1e-9, "PASS"),
    ("llm_speculative_sampling", "rule", None, 1e-9, "PASS"),
    ("llm_speculative_sampling", "rule_as_shipped", None, 1e-9, "FAIL"),
    ("llm_speculative_sampling", "rule_with_seed", None, 1e-9, "FAIL"),
    ("romsto_speculative_decoding", "rule", None, 1e-9, "PASS"),
    ("romsto_speculative_decoding", "rule_skip_adjustment", None, 1e-9, "FAIL"),
    ("romsto_greedy_processor", "rule", "drafter", 1e-9, "FAIL"),
    ("vllm_v0_rejection_sampler", "rule", None, 1e-6, "PASS"),
    ("vllm_v0_rejection_sampler", "rule_without_bonus", None, 1e-6, "PASS"),
    ("vllm_v1_rejection_sampler", "rule", None, 1e-6, "PASS"),
    ("vllm_v1_rejection_sampler", "rule_without_draft_probs", "drafter", 1e-6, "PASS"),
    ("eagle_evaluate_posterior", "rule", "drafter", 1e-9, "PASS"),
    ("medusa_typical_acceptance", "rule", "drafter", 1e-9, "FAIL"),
]


def _module(name: str):
    return importlib.import_module(f"examples.audits.{name}")


@pytest.mark.parametrize(
    ("module", "rule", "drafter", "tolerance", "verdict"),
    ADAPTERS,
    ids=[f"{m}:{r}" for m, r, *_ in ADAPTERS],
)
def test_adapter_verdict(module, rule, drafter, tolerance, verdict):
    adapter = _module(module)
    report = audit(
        getattr(adapter, rule),
        getattr(adapter, drafter) if drafter else None,
        cases=CASES,
        tolerance=tolerance,
    )
    assert report.verdict == verdict, report
    if report.problem is None:  # judged exactly, never by the statistical fallback
        assert report.method == "exhaustive", report.fallback


def test_every_adapter_is_covered():
    """A new ``rule*`` function in examples/audits/ needs its row above (and in AUDITS.md)."""
    package = importlib.import_module("examples.audits")
    found = {
        (info.name, name)
        for info in pkgutil.iter_modules(package.__path__)
        for name, value in inspect.getmembers(_module(info.name), inspect.isfunction)
        if name.startswith("rule") and value.__module__ == f"examples.audits.{info.name}"
    }
    assert found == {(m, r) for m, r, *_ in ADAPTERS}


def test_greedy_processor_wrong_token_one_third():
    """p = [.6, .4], q = [.9, .1]: greedy on the target emits 0; GreedyProcessor's draft is 0
    (argmax q), kept with probability 2/3, and a rejection emits argmax(max_fn(p - q)) = 1."""
    adapter = _module("romsto_greedy_processor")
    p, q = np.array([[0.6, 0.4], [0.6, 0.4]]), np.array([[0.9, 0.1]])
    outputs = enumerate_outputs(lambda rng: adapter.rule(p, q, [0], rng)).distribution
    first: dict[int, float] = {}
    for output, prob in outputs.items():
        first[output[0]] = first.get(output[0], 0.0) + prob
    assert first == pytest.approx({0: 2 / 3, 1: 1 / 3}, abs=1e-12)
