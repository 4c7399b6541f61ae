"""Model files that can be trusted: a tiny fake packaged model (small part files and a spec with
their sha256) assembled, damaged in every way the issue lists, and assembled by two processes at
once. Each case ends with a verified file or a clear error."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import multiprocessing
import os
import time

import numpy as np
import pytest

from spec_decode.backends import assembly, cache, converted, registry, verified

PARTS = [b"GGUF" + bytes(range(256)) * 8, b"\1" * 3000, bytes(range(200, 256)) * 40]
DATA = b"".join(PARTS)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A packaged model "fake" whose wheels are three small files; the cache is private."""
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    parts = []
    for i, data in enumerate(PARTS):
        part = tmp_path / "wheels" / f"part{i}.bin"
        part.parent.mkdir(exist_ok=True)
        part.write_bytes(data)
        parts.append(part)
    spec = registry.PreparedSpec(
        "fake", "-", "fake-part", len(parts), "0", len(DATA), hashlib.sha256(DATA).hexdigest()
    )
    monkeypatch.setitem(registry.PREPARED, "fake", spec)
    monkeypatch.setattr(assembly, "part_files", lambda _spec: parts)
    return spec


@pytest.fixture
def counts(monkeypatch):
    """How many times files were hashed and assembled."""
    seen = {"hashed": 0, "assembled": 0}
    hash_file, assemble = verified.sha256_file, assembly.assemble_gguf

    def counting_hash(*args, **kwargs):
        seen["hashed"] += 1
        return hash_file(*args, **kwargs)

    def counting_assemble(*args, **kwargs):
        seen["assembled"] += 1
        return assemble(*args, **kwargs)

    monkeypatch.setattr(verified, "sha256_file", counting_hash)
    monkeypatch.setattr(assembly, "assemble_gguf", counting_assemble)
    return seen


def leftovers(folder):
    """Temporary files left in a folder."""
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_assembled_once_then_trusted_by_stat(fake, counts):
    path = assembly.gguf_file("fake")
    assert path.read_bytes() == DATA and counts == {"hashed": 0, "assembled": 1}
    record = verified.read_marker(path.with_name(path.name + ".verified"))[path.name]
    assert record.sha256 == fake.sha256 and record.size == len(DATA)
    assert assembly.gguf_file("fake") == path and counts == {"hashed": 0, "assembled": 1}
    assert assembly.state("fake") == assembly.State(True, True, len(DATA))
    assert not leftovers(path.parent)


def test_same_size_overwrite_in_the_middle_is_assembled_again(fake, counts, caplog):
    path = assembly.gguf_file("fake")
    before = path.stat()
    with path.open("r+b") as f:
        f.seek(len(DATA) // 2)
        f.write(b"!" * 500)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # even with the old mtime
    assert path.stat().st_size == len(DATA) and not assembly.is_verified("fake")
    assert assembly.gguf_file("fake").read_bytes() == DATA
    assert counts["assembled"] == 2 and "does not match its sha256" in caplog.text
    assert str(path) in caplog.text


@pytest.mark.parametrize("damage", ["truncate", "directory", "empty", "delete", "symlink"])
def test_a_damaged_file_is_assembled_again(fake, tmp_path, damage):
    path = assembly.gguf_file("fake")
    if damage == "truncate":
        os.truncate(path, len(DATA) // 3)
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "delete":
        path.unlink()
    else:
        path.unlink()
        if damage == "directory":
            path.mkdir()
            (path / "inside").write_text("x")
        else:
            (tmp_path / "other").write_bytes(DATA[::-1])
            path.symlink_to(tmp_path / "other")
    assert not assembly.is_verified("fake")
    assert assembly.gguf_file("fake").read_bytes() == DATA
    assert path.is_file() and not path.is_symlink() and assembly.is_verified("fake")


def test_a_touched_file_is_hashed_again_not_rebuilt(fake, counts):
    path = assembly.gguf_file("fake")
    os.utime(path, ns=(1, 1))
    assert not assembly.is_verified("fake")
    assembly.gguf_file("fake")
    assert counts == {"hashed": 1, "assembled": 1} and assembly.is_verified("fake")


@pytest.mark.parametrize("marker", ["[]", "null", "3", "{", '{"format": 1, "files": {"x": 1}}', ""])
def test_a_malformed_marker_means_hash_again(fake, counts, marker):
    path = assembly.gguf_file("fake")
    path.with_name(path.name + ".verified").write_text(marker)
    assert not assembly.is_verified("fake")
    assert assembly.gguf_file("fake").read_bytes() == DATA
    assert counts == {"hashed": 1, "assembled": 1} and assembly.is_verified("fake")


def test_a_marker_of_another_sha256_is_not_believed(fake, counts):
    path = assembly.gguf_file("fake")
    marker = path.with_name(path.name + ".verified")
    stored = json.loads(marker.read_text())
    stored["files"][path.name]["sha256"] = "0" * 64
    marker.write_text(json.dumps(stored))
    assert not assembly.is_verified("fake")
    assembly.gguf_file("fake")
    assert counts["hashed"] == 1 and assembly.is_verified("fake")


def test_an_older_version_s_marker_is_replaced_after_one_hash(fake, counts):
    """The cache of an older version: the GGUF beside ``<name>.ok`` holding its sha256."""
    path = assembly.gguf_path("fake")
    path.parent.mkdir(parents=True)
    path.write_bytes(DATA)
    path.with_suffix(".ok").write_text(fake.sha256 + "\n")
    assert assembly.gguf_file("fake").read_bytes() == DATA
    assert counts == {"hashed": 1, "assembled": 0} and assembly.is_verified("fake")


def test_verify_hashes_even_when_stat_is_unchanged(fake, counts, monkeypatch):
    """On a file system whose times cannot be trusted, ``gguf_file`` believes the stat, and
    ``models verify`` is what catches the damage."""
    path = assembly.gguf_file("fake")
    monkeypatch.setattr(verified.FileRecord, "same_stat", lambda self, p: True)
    with path.open("r+b") as f:
        f.write(b"XXXX")
    assert assembly.gguf_file("fake").read_bytes() != DATA  # trusted: the documented limit
    assert assembly.verify("fake") is False  # re-hashed, did not match: assembled again
    assert path.read_bytes() == DATA and assembly.verify("fake") is True


def test_wheels_that_do_not_match_leave_nothing(fake, monkeypatch, tmp_path):
    bad = tmp_path / "wheels" / "bad.bin"
    bad.write_bytes(b"not the model")
    monkeypatch.setattr(assembly, "part_files", lambda _spec: [bad])
    with pytest.raises(ValueError, match=r"sha256.*pip install --force-reinstall"):
        assembly.gguf_file("fake")
    folder = assembly.gguf_path("fake").parent
    assert sorted(p.name for p in folder.iterdir()) == ["fake.lock"]


def test_a_cache_that_cannot_be_written_is_a_clear_error(fake, monkeypatch):
    @contextlib.contextmanager
    def full(path):
        raise OSError(errno.ENOSPC, "No space left on device")
        yield

    monkeypatch.setattr(assembly, "atomic_file", full)
    with pytest.raises(ValueError, match=r"cannot write the model cache .*No space left.*CACHE"):
        assembly.gguf_file("fake")


def test_missing_part_wheel_is_a_clear_error():
    spec = registry.PreparedSpec("t", "-", "spec-decode-no-such-part-", 1, "0", 1, "0" * 64)
    with pytest.raises(FileNotFoundError, match="not installed"):
        registry.part_files(spec)


def test_unknown_model_name_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown packaged model 'nope'; known: qwen"):
        assembly.gguf_file("nope")


def _assemble_slowly(log: str, start, results) -> None:
    """A child process: assemble "fake" (inherited by fork) once both children are ready,
    noting each chunk it writes in ``log``."""

    def progress(stage, done, total):
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {stage}\n")
        time.sleep(0.05)

    start.wait()
    results.put(str(assembly.gguf_file("fake", progress)))


def test_two_processes_assembling_at_once_end_with_one_verified_file(fake, tmp_path):
    log = tmp_path / "log"
    context = multiprocessing.get_context("fork")
    start, results = context.Barrier(2), context.Queue()
    children = [
        context.Process(target=_assemble_slowly, args=(str(log), start, results)) for _ in range(2)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=30)
    assert [child.exitcode for child in children] == [0, 0]
    path = assembly.gguf_path("fake")
    assert [results.get(timeout=5) for _ in children] == [str(path)] * 2
    assert path.read_bytes() == DATA and assembly.is_verified("fake")
    assert len({line.split()[0] for line in log.read_text().splitlines()}) == 1  # one assembler
    assert not leftovers(path.parent)


def test_an_interrupted_assembly_leaves_no_marker_and_no_partial_file(fake, monkeypatch):
    def interrupted(stage, done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        assembly.gguf_file("fake", interrupted)
    folder = assembly.gguf_path("fake").parent
    assert sorted(p.name for p in folder.iterdir()) == ["fake.lock"]
    assert assembly.gguf_file("fake").read_bytes() == DATA


# ---- the folder converted for transformers -----------------------------------------------------


@pytest.fixture
def fake_convert(monkeypatch):
    """A stand-in for the minutes-long conversion: two small files from the GGUF."""
    runs = []

    def convert(gguf, out):
        runs.append(gguf)
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_bytes(gguf.read_bytes()[:100])

    monkeypatch.setattr(converted, "convert_gguf", convert)
    return runs


def test_converted_folder_is_checked_and_converted_again_when_damaged(fake, fake_convert):
    folder = converted.prepare("fake")
    assert converted.is_prepared("fake") and len(fake_convert) == 1
    assert fake_convert[0] == assembly.gguf_path("fake")  # converted from the verified GGUF
    assert converted.prepare("fake") == folder and len(fake_convert) == 1
    os.utime(folder / "config.json", ns=(1, 1))  # touched, same content: re-hashed only
    converted.prepare("fake")
    assert len(fake_convert) == 1 and converted.is_prepared("fake")
    (folder / "model.safetensors").write_bytes(b"damaged")
    assert not converted.is_prepared("fake")
    assert converted.verify("fake") is False and not (folder / converted.READY_MARKER).exists()
    converted.prepare("fake")
    assert len(fake_convert) == 2 and converted.verify("fake") is True
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".fake.")]


def test_converted_folder_of_an_older_version_is_adopted(fake, fake_convert, counts):
    folder = converted.model_dir("fake")
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / converted.READY_MARKER).write_text(fake.sha256 + "\n")
    assert not converted.is_prepared("fake")
    assert converted.prepare("fake") == folder and not fake_convert
    assert converted.is_prepared("fake")


def test_a_failed_conversion_leaves_no_folder(fake, monkeypatch):
    def broken(gguf, out):
        (out / "half").write_text("x")
        raise RuntimeError("out of memory")

    monkeypatch.setattr(converted, "convert_gguf", broken)
    with pytest.raises(RuntimeError):
        converted.prepare("fake")
    root = converted.model_dir("fake").parent
    assert not converted.model_dir("fake").exists()
    assert not [p for p in root.iterdir() if p.name.startswith(".fake.")]


# ---- the cache's own helpers -------------------------------------------------------------------


def test_models_and_calibrations_are_siblings_under_the_root(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    assert cache.models_root() == tmp_path / "models"
    assert cache.calibration_root() == tmp_path / "calibration"


def test_atomic_file_keeps_the_old_content_on_failure(tmp_path):
    target = tmp_path / "f"
    cache.atomic_write_text(target, "old")
    with pytest.raises(RuntimeError), cache.atomic_file(target) as out:
        out.write(b"half")
        raise RuntimeError
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["f"]
    assert (target.stat().st_mode & 0o777) == 0o666 & ~cache._umask()


def test_a_file_truncated_or_overwritten_under_a_loaded_model_changes_nothing(tmp_path):
    """Weights are read into memory, not mapped: a mapped file truncated under a running model
    kills the process with SIGBUS, and one overwritten in place changes its weights silently."""
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gguf")
    from spec_decode.backends.llamacpp import load_model
    from spec_decode.certify.tiny_gguf import tiny_weights, write_gguf

    original = write_gguf(tmp_path / "target.gguf", tiny_weights(0, logit_scale=6.0))
    target = load_model(original, n_threads=1)
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(original.read_bytes())
    model = load_model(copy, n_threads=1)
    size = copy.stat().st_size
    with copy.open("r+b") as f:  # same size, every byte after the header overwritten
        f.seek(4096)
        f.write(b"\x7f" * (size - 4096))
    os.truncate(copy, 100)
    prefix, block = [1, 4, 5], [4, 4, 5]
    assert np.array_equal(model.score(prefix, block), target.score(prefix, block))
