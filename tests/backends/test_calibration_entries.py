"""Calibration entries that are malformed, noisy or stale: each is named, measured again or kept
with a warning, and never believed when it cannot be right. No test asserts a timing: the toy
models advance a simulated clock."""

from __future__ import annotations

import json

import pytest
from calibration_toys import SIZE_LIST, SIZES, CountingModel

from spec_decode.backends import calibration
from spec_decode.backends import calibration_store as store
from spec_decode.drafting.costs import CostCurve

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


def test_a_stale_entry_is_neither_replaced_nor_dropped_for_a_disturbed_measurement(model, caplog):
    """The stale entry's curve, scaled to the one-token pass timed now, is used instead of the
    busy machine's; the entry stays, to be checked again next run."""
    key = model_key(model)
    file = store.calibration_file(key)
    quiet = [0.001 * (1 + n) for n in range(SIZES)]
    write_entry(file, key, {"seconds": quiet, "sizes": SIZE_LIST})  # quiet then, 10x slower now
    model.delays = [0.0] * 3 + [0.05, 0.05, 0.0] * 1000  # the check, then every attempt busy
    seconds, cached = calibration.pass_seconds("llama.cpp", model)
    assert not cached and "stale" in caplog.text and "using the stored curve" in caplog.text
    assert seconds == pytest.approx([10 * s for s in quiet])  # the quiet shape, at today's pace
    assert json.loads(file.read_text())["seconds"] == quiet


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


def test_a_time_far_off_the_cached_one_disagrees():
    assert calibration.disagrees(0.03, float("nan")) and calibration.disagrees(0.03, 0.0)
    assert calibration.disagrees(0.03, 0.2) and not calibration.disagrees(0.03, 0.05)
