"""Calibration: what is measured, how it is cached and keyed, how a malformed, noisy or stale
entry is caught, the cost curve's interpolation, and the transformers backend on CUDA (skipped
without a GPU). No test asserts a timing: the toy models advance a simulated clock."""

from __future__ import annotations

import json

import numpy as np
import pytest

from spec_decode import random_markov
from spec_decode.backends import calibration
from spec_decode.backends import calibration_store as store
from spec_decode.drafting.costs import CostCurve


class Clock:
    """A simulated clock: the models below advance it by what each call "costs"."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


CLOCK = Clock()
#: How many block sizes a default calibration times.
SIZES = len(calibration.BLOCK_SIZES)
SIZE_LIST = list(calibration.BLOCK_SIZES)


class CountingModel:
    """A toy model with a path and thread count, counting the tokens of every scoring call; a
    call scoring n tokens takes ``per_token * n`` simulated seconds, plus the next of ``delays``
    (other work on the machine) while any are left."""

    def __init__(self, path, threads: int = 2, per_token: float = 0.01) -> None:
        self.inner = random_markov(8, seed=0)
        self.vocab_size, self.path, self.n_threads = 8, path, threads
        self.per_token = per_token
        self.delays: list[float] = []
        self.blocks: list[int] = []
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1

    def next_dist(self, prefix):
        return self.inner.next_dist(prefix)

    def score(self, prefix, tokens):
        self.blocks.append(len(tokens) + 1)
        CLOCK.now += self.per_token * (len(tokens) + 1) + (self.delays.pop(0) if self.delays else 0)
        return np.array(
            [self.inner.next_dist([*prefix, *tokens[:i]]) for i in range(len(tokens) + 1)]
        )


@pytest.fixture
def model(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEC_DECODE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(calibration, "_clock", CLOCK)
    weights = tmp_path / "model.gguf"
    weights.write_bytes(b"0123")
    return CountingModel(weights)


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


# ---- entries that are malformed, noisy or stale -------------------------------------------------

MALFORMED = {
    "a list": "[0.03, 0.05]",
    "null": "null",
    "a number": "3.16",
    "a string": '"fast"',
    "not JSON": "{not json",
    "not UTF-8": b"\xff\xfe",
    "no seconds": {"seconds": None},
    "no identity": {"identity": None},
    "an old format": {"format": 1},
    "seconds not a list": {"seconds": 0.03},
    "no seconds at all": {"seconds": []},
    "NaN": {"seconds": [float("nan")] * 17},
    "inf": {"seconds": [float("inf")] * 17},
    "negative": {"seconds": [-1.0] * 17},
    "zero": {"seconds": [0.0] * 17},
    "a string time": {"seconds": ["0.03"] * 17},
    "a boolean time": {"seconds": [True] * 17},
    "a directory": None,
}


def write_entry(file, key, case):
    """Put the malformed entry ``case`` where the calibration of ``key`` is cached."""
    file.parent.mkdir(parents=True, exist_ok=True)
    if case is None:
        file.mkdir()
        (file / "inside").write_text("x")
    elif isinstance(case, bytes):
        file.write_bytes(case)
    elif isinstance(case, str):
        file.write_text(case)
    else:
        entry = {"format": store.FORMAT, "identity": key, "seconds": [0.01] * 17}
        entry.update(case)
        entry = {k: v for k, v in entry.items() if v is not None}
        file.write_text(json.dumps(entry))


@pytest.mark.parametrize("role", ["target", "draft"])
@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_entry_is_named_and_measured_again(model, tmp_path, caplog, role, case):
    weights = tmp_path / "draft.gguf"
    weights.write_bytes(b"01")
    draft = CountingModel(weights, per_token=0.004)
    broken = model if role == "target" else draft
    key = store.model_identity("llama.cpp", broken)
    file = store.calibration_file(key)
    write_entry(file, key, MALFORMED[case])
    assert calibration.cached_seconds(key) is None
    assert f"calibration {file} " in caplog.text and "measuring it again" in caplog.text
    assert "NoneType" not in caplog.text and "float" not in caplog.text
    curve = calibration.cost_curve("llama.cpp", model, draft)
    assert curve.draft_seconds == pytest.approx(0.004) and curve.target(1) == pytest.approx(0.01)
    stored = json.loads(file.read_text())
    assert stored["identity"] == key and all(s > 0 for s in stored["seconds"])
    assert not [p for p in file.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_malformed_draft_entry_means_load_the_draft(model):
    """Before loading a draft, a corrupt cached cost is no reason to skip it (it used to be
    taken at face value: "it cannot pay")."""
    curve = CostCurve.from_passes([0.03, 0.05])
    key = store.identity("llama.cpp", model.path, 2)
    file = store.calibration_file(key)
    for case in ("negative", "NaN", "a list"):
        write_entry(file, key, MALFORMED[case])
        assert calibration.cached_draft_seconds(key, curve) is None
    write_entry(file.with_suffix(".x"), key, {"seconds": [0.01]})
    file.with_suffix(".x").replace(file)
    assert calibration.cached_draft_seconds(key, curve) == 0.01


def test_a_draft_cost_above_a_target_pass_is_not_believed_before_loading(model):
    """3.16 s a draft token, cached while the machine was busy, would keep the draft from ever
    being loaded (and so measured) again."""
    curve = CostCurve.from_passes([0.03, 0.05])
    key = store.identity("llama.cpp", model.path, 2)
    write_entry(store.calibration_file(key), key, {"seconds": [3.16]})
    assert calibration.cached_draft_seconds(key, curve) is None


def test_a_noisy_measurement_is_repeated(model, caplog):
    # the first attempt (a warm-up, then 3 rounds of every size): two of its rounds disturbed
    model.delays = [0.0] + [0.05] * 2 * SIZES + [0.0] * SIZES
    seconds, cached = calibration.pass_seconds("llama.cpp", model)
    assert not cached and seconds[0] == pytest.approx(0.01)  # the quiet second attempt
    assert len(model.blocks) == 2 * (1 + 3 * SIZES) and "busy" not in caplog.text
    stored = json.loads(store.calibration_file(model_key(model)).read_text())
    assert stored["spread"] == 0


def test_a_curve_that_runs_backwards_is_measured_again(model, caplog):
    """Other work during the one-token rounds alone makes a 2-token pass look cheaper than a
    one-token pass, with steady repetitions: disturbed all the same."""
    model.delays = [0.0] + [0.1 if i % 4 == 0 else 0.0 for i in range(3 * 4)]  # size 1, all rounds
    seconds, _ = calibration.pass_seconds("llama.cpp", model, max_block=4)
    assert len(model.blocks) == 2 * (1 + 3 * 4)  # measured twice
    assert seconds == pytest.approx([0.01, 0.02, 0.03, 0.04])
    assert calibration.inversion([0.11, 0.02, 0.03, 0.04]) == pytest.approx(0.11 / 0.02 - 1)
    assert calibration.inversion([0.01, 0.02, 0.019, 0.04]) == pytest.approx(0.02 / 0.019 - 1)


def test_a_uniformly_slower_machine_is_not_noise(model):
    """Every call slower by the same amount is a steady machine (a stale cache is caught by
    the check on use instead)."""
    model.delays = [0.05] * 1000
    calibration.pass_seconds("llama.cpp", model, max_block=4)
    assert len(model.blocks) == 1 + 3 * 4


def test_a_measurement_that_never_settles_is_kept_with_a_warning(model, caplog):
    model.delays = [0.05, 0.05, 0.0] * 1000  # two calls in three disturbed, in every attempt
    calibration.pass_seconds("llama.cpp", model, max_block=4)
    assert len(model.blocks) == calibration.ATTEMPTS * (1 + 3 * 4)
    assert "busy" in caplog.text and calibration.FIX in caplog.text


def test_a_stale_entry_is_not_replaced_by_a_disturbed_measurement(model, caplog):
    key = model_key(model)
    file = store.calibration_file(key)
    write_entry(
        file, key, {"seconds": [0.001] * SIZES, "sizes": SIZE_LIST}
    )  # quiet then, 10x slower now
    model.delays = [0.0] * 3 + [0.05, 0.05, 0.0] * 1000  # the check, then every attempt busy
    seconds, cached = calibration.pass_seconds("llama.cpp", model)
    assert not cached and seconds[0] > 0.001 and "stale" in caplog.text and "busy" in caplog.text
    assert json.loads(file.read_text())["seconds"] == [0.001] * SIZES


def test_a_calibration_that_cannot_be_stored_is_used_and_reported(model, monkeypatch, caplog):
    def full(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store, "atomic_write_text", full)
    seconds, cached = calibration.pass_seconds("llama.cpp", model, max_block=2)
    assert len(seconds) == 2 and not cached and "could not store calibration" in caplog.text


def model_key(model):
    return store.model_identity("llama.cpp", model)


@pytest.mark.parametrize(("cached", "stale"), [(0.01, False), (0.02, False), (3.16, True)])
def test_a_cached_curve_is_checked_against_a_pass_timed_now(model, caplog, cached, stale):
    key = model_key(model)
    write_entry(
        store.calibration_file(key),
        key,
        {"seconds": [cached] * SIZES, "sizes": SIZE_LIST},
    )
    seconds, from_cache = calibration.pass_seconds("llama.cpp", model)
    assert from_cache is not stale and ("stale" in caplog.text) is stale
    assert seconds[0] == pytest.approx(0.01 if stale else cached)
    timed = len(model.blocks)
    calibration.pass_seconds("llama.cpp", model)  # once per process: no second check
    assert len(model.blocks) == timed


def test_revalidate_names_what_disagrees_and_the_fix():
    curve = CostCurve.from_passes([0.03, 0.05], 0.015)
    assert calibration.revalidate(curve, 0.035, 0.012) is None
    message = calibration.revalidate(curve, 0.035, 3.16)
    assert "draft token takes 3160.0 ms now, 15.0 ms" in message
    assert message.endswith("spec-decode calibrate --recalibrate")
    assert "target pass" in calibration.revalidate(curve, 0.2)
    assert calibration.disagrees(0.03, float("nan")) and calibration.disagrees(0.03, 0.0)


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
