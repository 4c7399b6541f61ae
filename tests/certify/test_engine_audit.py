"""The end-to-end engine audit: this project's own toy loop PASSes (the serving engine's audit
is in tests/serving/test_engine_audit_serving.py), every whole-loop bug of the engine zoo FAILs,
the exact control that only drops the bonus token PASSes, and the command reports it (exit 0,
1, 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tiers import fast_only
from typer.testing import CliRunner

from spec_decode.certify.engine_audit import audit_engine, exact_joint
from spec_decode.certify.engines import BUGS, CONTROLS, ENGINES, ToyEngine
from spec_decode.certify.engines_llamaserver import LlamaServerEngine
from spec_decode.cli.app import app
from spec_decode.core.sampling import SamplingParams

WARPED = SamplingParams(0.7, top_k=3)  # where raw and warped draft distributions differ
SAMPLES = 6_000  # detects TV >= 0.053 with probability 0.99 on the toy pair's 27 sequences


def test_the_exact_joint_is_the_product_of_the_plain_rows():
    engine = ToyEngine()
    joint, pooled = exact_joint(engine, [0], 2, WARPED)
    assert pooled == 0.0 and sum(joint.values()) == pytest.approx(1.0, abs=1e-12)
    first = engine.target_probs([0], WARPED)
    for (a, b), mass in joint.items():
        assert mass == pytest.approx(first[a] * engine.target_probs([0, a], WARPED)[b])


class Binned:
    """A toy engine read as a real model's would be: only its rows' ``listed`` likeliest tokens,
    and continuations below ``min_mass`` pooled."""

    def __init__(self, engine, listed: int, min_mass: float) -> None:
        self.engine, self.listed, self.min_mass = engine, listed, min_mass
        self.vocab_size, self.generate = engine.vocab_size, engine.generate

    def target_probs(self, prefix, sampling):
        row = np.array(self.engine.target_probs(prefix, sampling), dtype=float)
        row[np.argsort(row)[: -self.listed]] = 0.0
        return row


@pytest.mark.slow
def test_a_binned_joint_pools_the_tail_and_still_judges():
    """Rows cut to their 2 likeliest of 6 tokens, sequences under 0.02 pooled: the pooled cell
    holds what is missing, the exact engine PASSes and a zoo bug still FAILs."""
    joint, pooled = exact_joint(Binned(ToyEngine(), 2, 0.02), [0], 3, WARPED, min_mass=0.02)
    assert 0 < pooled < 1 and sum(joint.values()) + pooled == pytest.approx(1.0, abs=1e-12)
    assert all(mass >= 0.02 for mass in joint.values())
    exact = audit_engine(Binned(ToyEngine(), 2, 0.02), samples=SAMPLES, sampling=WARPED)
    broken = audit_engine(Binned(ToyEngine("raw-q"), 2, 0.02), samples=SAMPLES, sampling=WARPED)
    assert exact.verdict == "PASS" and exact.pooled == pytest.approx(pooled)
    assert broken.verdict == "FAIL"


@pytest.mark.parametrize(
    "name", fast_only(["ours", "ours:penalties", *(f"control:{c}" for c in CONTROLS)], ["ours"])
)
def test_exact_engines_pass(name):
    report = audit_engine(ENGINES[name](), samples=SAMPLES, sampling=WARPED)
    assert report.verdict == "PASS" and report.problem is None
    assert report.detectable_tv < 0.06 and report.plug_in_tv < report.exact_tv_95 * 1.5
    assert report.tv_interval[0] < report.exact_tv_95  # consistent with sampling noise alone


@pytest.mark.parametrize("bug", fast_only(BUGS, ["raw-q", "stale-cache"]))
def test_every_zoo_engine_fails(bug):
    report = audit_engine(ENGINES[f"zoo:{bug}"](), samples=SAMPLES, sampling=WARPED)
    assert report.verdict == "FAIL" and report.p_value < 1e-6
    assert report.tv_interval[0] > report.exact_tv_95  # the bias is far above the noise
    assert report.tv_interval[0] <= report.tv <= report.tv_interval[1]


runner = CliRunner()


def test_the_command_lists_audits_and_exits_by_verdict():
    listed = runner.invoke(app, ["audit-engine", "--list"])
    assert listed.exit_code == 0 and all(name in listed.output for name in ENGINES)
    passed = runner.invoke(app, ["audit-engine", "ours", "--samples", "3000", "--json"])
    assert passed.exit_code == 0 and json.loads(passed.output)["verdict"] == "PASS"
    failed = runner.invoke(app, ["audit-engine", "zoo:greedy-draft", "--samples", "3000"])
    assert failed.exit_code == 1 and "FAIL" in failed.output
    for bad in (["no_such_module:factory"], ["ours", "--tokens", "9"], []):
        assert runner.invoke(app, ["audit-engine", *bad]).exit_code == 2, bad


def test_an_engine_refused_before_starting_has_nothing_to_close():
    """Arguments refused before any server started: the half-built engine's close (also run by
    the garbage collector) stops nothing and raises nothing."""
    with pytest.raises(ValueError, match="unknown mode"):
        LlamaServerEngine("no-such-mode")
    LlamaServerEngine.__new__(LlamaServerEngine).close()


@pytest.mark.slow
def test_an_engine_that_cannot_start_is_a_clear_error(tmp_path, monkeypatch):
    """A server that dies at once (or a model not installed) is exit 2 with a message, not a
    traceback."""
    dies = tmp_path / "llama-server"
    dies.write_text("#!/bin/sh\necho 'no such luck' >&2\nexit 3\n")
    dies.chmod(0o755)
    monkeypatch.setenv("SPEC_DECODE_LLAMA_SERVER", str(dies))
    result = runner.invoke(app, ["audit-engine", "llama-server:plain", "--samples", "10"])
    assert result.exit_code == 2, result.output
    assert "error: engine llama-server:plain" in " ".join(result.output.split())
    assert not isinstance(result.exception, RuntimeError | OSError)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["plain", "assisted", "early-exit"])
def test_transformers_generation_passes_end_to_end(mode):
    """transformers' own generate (plain: the check that the adapter's reference is right;
    assisted: with the draft model; early-exit: drafts from the target's first layer) on the
    tiny Qwen2 pair. 800 runs of 2 tokens detect TV >=
    0.12 with probability 0.99 (the full-size runs are in AUDITS.md)."""
    pytest.importorskip("transformers")
    engine = ENGINES[f"hf:{mode}"]()
    report = audit_engine(engine, tokens=2, samples=800, sampling=WARPED)  # from engine.prefix
    assert report.verdict == "PASS" and report.problem is None, report


@pytest.mark.parametrize("mode", fast_only(["plain", "prompt-lookup"], ["plain"]))
def test_llama_cpp_python_generation_passes_end_to_end(mode):
    """llama-cpp-python's own generate, with prompt-lookup drafts verified by sample-and-match,
    on a tiny GGUF over the exact-rows build: 3,000 runs of 3 tokens detect TV >= 0.074 with
    probability 0.99."""
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gguf")
    engine = ENGINES[f"llama-cpp-python:{mode}"]()
    report = audit_engine(engine, tokens=3, samples=3000, sampling=WARPED)  # from engine.prefix
    assert report.verdict == "PASS" and report.problem is None, report


def test_llama_cpp_python_refuses_controls_its_sampler_orders_differently():
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gguf")
    engine = ENGINES["llama-cpp-python:plain"]()
    with pytest.raises(ValueError, match="top-p and min-p"):
        engine.target_probs(engine.prefix, SamplingParams(0.7, top_p=0.9))
