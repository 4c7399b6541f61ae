"""Calibration: what is measured, how it is cached and keyed (a malformed, noisy or stale entry:
test_calibration_entries.py), the cost curve's interpolation, and the transformers backend on
CUDA (skipped without a GPU). No test asserts a timing: the toy models advance a simulated clock."""

from __future__ import annotations

import json

import numpy as np
import pytest
from calibration_toys import CountingModel

from spec_decode.backends import calibration
from spec_decode.backends import calibration_store as store
from spec_decode.drafting.costs import CostCurve


def test_measures_every_block_length_interleaved(model):
    seconds = calibration.measure_passes(model, max_block=5, repetitions=2)
    assert len(seconds) == 5 and all(s >= 0 for s in seconds)
    assert model.resets == 1
    assert model.blocks == [1, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5]  # warm-up, then two rounds


def test_caches_by_identity_and_recalibrates_on_request(model):
    first, cached = calibration.pass_seconds("llama.cpp", model, max_block=4)
    assert not cached and len(model.blocks) == 1 + 3 * 4
    again, cached = calibration.pass_seconds("llama.cpp", model, max_block=3)
    assert cached and again == first[:3] and len(model.blocks) == 13
    _, cached = calibration.pass_seconds("llama.cpp", model, max_block=4, recalibrate=True)
    assert not cached
    _, cached = calibration.pass_seconds("llama.cpp", model, max_block=6)  # more sizes: measure
    assert not cached
    other_threads = CountingModel(model.path, threads=1)
    _, cached = calibration.pass_seconds("llama.cpp", other_threads, max_block=4)
    assert not cached
    model.path.write_bytes(b"a different file")  # another size on disk: another entry
    _, cached = calibration.pass_seconds("llama.cpp", model, max_block=4)
    assert not cached


def test_a_corrupt_cache_entry_is_measured_again(model):
    calibration.pass_seconds("llama.cpp", model, max_block=2)
    file = store.calibration_file(store.model_identity("llama.cpp", model))
    file.write_text("{not json")
    _, cached = calibration.pass_seconds("llama.cpp", model, max_block=2)
    assert not cached and json.loads(file.read_text())["identity"]["threads"] == 2


def test_a_model_is_found_in_the_cache_before_it_is_loaded(model):
    """The key computed from the file and thread count alone is the loaded model's key, so a
    draft's cost can be read before deciding whether to load it."""
    assert calibration.cached_seconds(store.identity("llama.cpp", model.path, 2)) is None
    measured, _ = calibration.pass_seconds("llama.cpp", model, max_block=2)
    key = store.identity("llama.cpp", model.path, 2)
    assert key == store.model_identity("llama.cpp", model)
    assert calibration.cached_seconds(key, max_block=2) == measured
    assert calibration.cached_seconds(key, max_block=3) is None  # fewer sizes than asked


def test_generate_loads_a_draft_only_when_it_could_pay(model):
    pytest.importorskip("llama_cpp")
    from spec_decode.serving.config import draft_may_pay as _draft_may_pay

    cpu = CostCurve((1, 2, 3, 5, 9, 17), (0.030, 0.0465, 0.063, 0.099, 0.180, 0.225))
    draft = str(model.path)
    assert _draft_may_pay("llama.cpp", draft, 2, cpu, 4)  # no cached cost: load and measure
    key = store.identity("llama.cpp", model.path, 2)
    file = store.calibration_file(key)
    file.parent.mkdir(parents=True)
    entry = {"format": store.FORMAT, "identity": key, "seconds": [0.019]}
    file.write_text(json.dumps(entry))
    assert not _draft_may_pay("llama.cpp", draft, 2, cpu, 4)  # 19 ms a token never pays here
    entry["seconds"] = [0.001]
    file.write_text(json.dumps(entry))
    assert _draft_may_pay("llama.cpp", draft, 2, cpu, 4)  # a nearly free draft may
    assert _draft_may_pay("transformers", draft, 2, cpu, 4)  # keyed by weights: always loaded


def test_cost_curve_takes_the_draft_as_one_token_passes(model, tmp_path):
    weights = tmp_path / "draft.gguf"
    weights.write_bytes(b"01")
    draft = CountingModel(weights)
    curve = calibration.cost_curve("llama.cpp", model, draft)
    assert curve.sizes == calibration.BLOCK_SIZES
    assert curve.draft_seconds is not None and draft.blocks == [1, 1, 1, 1]


@pytest.mark.parametrize(("max_block", "repetitions"), [(0, 3), (3, 0)])
def test_bad_arguments_are_refused(model, max_block, repetitions):
    with pytest.raises(ValueError, match="max_block"):
        calibration.measure_passes(model, max_block, repetitions)


# ---- the cost curve ----------------------------------------------------------------------------


def test_curve_interpolates_and_extrapolates():
    curve = CostCurve((1, 2, 3, 5, 9, 17), (30.0, 46.5, 63.0, 99.0, 180.0, 225.0), 19.0)
    assert curve.target(2) == 46.5 and curve.target(4) == 81.0
    assert curve.relative(17) == 7.5
    # beyond 17: the slope over the upper half of the points (3 -> 17 tokens: 162 / 14 a token)
    assert curve.target(19) == pytest.approx(225.0 + 2 * 162 / 14)
    assert CostCurve((1,), (10.0,)).target(3) == 30.0  # one point: proportional
    # a measured dip is kept (a 16-token block can cost less than a 12-token one on a CPU)
    dip = CostCurve((1, 2, 3, 4), (10.0, 14.0, 12.0, 20.0))
    assert [dip.target(n) for n in (1, 2, 3, 4)] == [10.0, 14.0, 12.0, 20.0]
    assert CostCurve((1, 2), (10.0, 8.0)).target(4) == 8.0  # never a negative slope beyond
    assert CostCurve.from_passes([1.0, 2.0]).sizes == (1, 2)


@pytest.mark.parametrize(
    ("sizes", "seconds", "draft"),
    [
        ((), (), None),
        ((1, 2), (1.0,), None),
        ((2,), (1.0,), None),
        ((1, 1), (1.0, 1.0), None),
        ((1,), (0.0,), None),
        ((1,), (float("nan"),), None),
        ((1,), (1.0,), -1.0),
    ],
)
def test_bad_curves_are_refused(sizes, seconds, draft):
    with pytest.raises(ValueError):
        CostCurve(sizes, seconds, draft)


def test_a_pass_of_no_tokens_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        CostCurve((1,), (1.0,)).target(0)


# ---- CUDA (skipped without a GPU) --------------------------------------------------------------


def test_transformers_on_cuda_scores_blocks_like_single_tokens(tmp_path, tiny_qwen2_folder):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from spec_decode.backends.transformers import load_model

    model = load_model(tiny_qwen2_folder(tmp_path / "tiny", seed=0), "fp32", device="cuda")
    assert model.device.type == "cuda"
    prefix, block = [2, 3, 4], [5, 6, 7, 8]
    rows = model.score(prefix, block)
    model.reset()
    singles = [model.next_dist(prefix + block[:i]) for i in range(len(block) + 1)]
    assert np.abs(rows - np.array(singles)).max() < 1e-4
    assert store.model_identity("transformers", model)["device"].startswith("cuda")


def test_an_unknown_device_is_refused(tmp_path, tiny_qwen2_folder):
    pytest.importorskip("torch")
    from spec_decode.backends.transformers import load_model

    with pytest.raises(ValueError, match="unknown device"):
        load_model(tiny_qwen2_folder(tmp_path / "tiny", seed=0), device="tpu")


def test_a_context_window_too_short_for_the_blocks_is_refused(model):
    model.context_window = 10
    with pytest.raises(ValueError, match="too small"):
        calibration.measure_passes(model, max_block=17)
    assert len(calibration.measure_passes(model, max_block=4, repetitions=1)) == 4


# ---- the command line --------------------------------------------------------------------------


@pytest.mark.slow  # loads tiny transformers models
def test_calibrate_command_prints_caches_and_plots(
    tmp_path, monkeypatch, tiny_qwen2_folder, caplog
):
    pytest.importorskip("transformers")
    from typer.testing import CliRunner

    from spec_decode.cli.app import app

    monkeypatch.setenv("SPEC_DECODE_CACHE", str(tmp_path / "cache"))
    target = str(tiny_qwen2_folder(tmp_path / "target", seed=0))
    draft = str(tiny_qwen2_folder(tmp_path / "draft", seed=1))
    args = ["calibrate", "--target", target, "--draft", draft, "--json"]
    result = CliRunner().invoke(app, [*args, "--plot", str(tmp_path / "curve.png")])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["backend"] == "transformers" and payload["block_sizes"] == [
        *range(1, 18),
        24,
        32,
    ]
    assert payload["relative"][0] == 1.0 and payload["draft_ms_per_token"] > 0
    assert (tmp_path / "curve.png").stat().st_size > 0
    files = sorted((tmp_path / "cache" / "calibration").glob("*.json"))
    assert len(files) == 2
    for file, junk in zip(files, ("null", "[1, 2]"), strict=True):
        file.write_text(junk)
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "Traceback" not in again.output
    assert f"calibration {files[0]} holds a JSON null, not an object" in caplog.text
    assert f"calibration {files[1]} holds a JSON list, not an object" in caplog.text
    assert all(isinstance(json.loads(file.read_text()), dict) for file in files)
    again = CliRunner().invoke(app, ["calibrate", "--target", target, "--draft", "none"])
    assert again.exit_code == 0 and "x one token" in again.stdout
    missing = CliRunner().invoke(app, ["calibrate", "--target", str(tmp_path / "nothing")])
    assert missing.exit_code == 2
