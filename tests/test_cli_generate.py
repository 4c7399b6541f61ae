"""``spec-decode generate`` and ``models`` on tiny models saved to disk (no download)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tokenizers import Tokenizer  # noqa: E402
from tokenizers.models import WordLevel  # noqa: E402
from tokenizers.pre_tokenizers import Whitespace  # noqa: E402
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from spec_decode import prepared  # noqa: E402
from spec_decode.cli import app  # noqa: E402

WORDS = ["<unk>", "</s>", "def", "return", "x", "+", "1", "(", ")", ":"]


def save_tiny(folder: Path, seed: int, vocab: int = len(WORDS)) -> Path:
    """A 1-layer Qwen2 and a whitespace word tokenizer, saved as a transformers folder."""
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        eos_token_id=1,
    )
    torch.manual_seed(seed)
    Qwen2ForCausalLM(config).save_pretrained(folder)
    backend = Tokenizer(WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    backend.pre_tokenizer = Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", eos_token="</s>"
    )
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return save_tiny(root / "target", seed=0), save_tiny(root / "draft", seed=1)


def invoke(*args: str) -> tuple[int, str]:
    """Exit code and standard output (stderr, which carries the summary, is appended)."""
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout + result.stderr


def test_generate_compare_json_is_identical_at_greedy(tiny_pair):
    target, draft = tiny_pair
    code, output = invoke(
        "generate", "--target", str(target), "--draft", str(draft), "--prompt", "def x ( ) :",
        "--max-new-tokens", "20", "--k", "3", "--compare", "--json",
    )  # fmt: skip
    assert code == 0, output
    payload = json.loads(output[: output.rindex("}") + 1])
    assert payload["identical_tokens"] is True
    spec, base = payload["runs"]["speculative"], payload["runs"]["target-only"]
    assert spec["tokens"] == base["tokens"] >= 1
    assert base["target_passes"] == base["tokens"]
    assert spec["target_passes"] <= spec["tokens"]


@pytest.mark.parametrize("drafting", [["--tree", "2,2"], ["--draft", "lookup"]])
def test_generate_tree_and_lookup_are_identical_at_greedy(tiny_pair, drafting):
    target, draft = tiny_pair
    args = ["generate", "--target", str(target), "--draft", str(draft), "--prompt", "def x ( ) :"]
    args += ["--max-new-tokens", "20", "--compare", "--json", *drafting]
    code, output = invoke(*args)
    assert code == 0, output
    payload = json.loads(output[: output.rindex("}") + 1])
    assert payload["identical_tokens"] is True
    assert payload["runs"]["speculative"]["tokens"] == payload["runs"]["target-only"]["tokens"]


def test_generate_streams_text_and_summary(tiny_pair):
    target, draft = tiny_pair
    code, output = invoke(
        "generate", "--target", str(target), "--draft", str(draft), "--prompt", "x + 1",
        "--max-new-tokens", "8", "--temperature", "0.7", "--seed", "3",
    )  # fmt: skip
    assert code == 0, output
    assert "tokens/s" in output and "acceptance" in output


def test_generate_rejects_bad_inputs(tiny_pair, tmp_path):
    target, _ = tiny_pair
    other = save_tiny(tmp_path / "other", seed=2, vocab=len(WORDS) + 1)
    cases = {
        "vocabularies differ": ["--draft", str(other)],
        "neither a prepared model": ["--draft", str(tmp_path / "missing")],
        "context window": ["--max-new-tokens", "100"],
        "prompt is empty": ["--prompt", "", "--raw"],
    }
    for message, extra in cases.items():
        args = ["generate", "--target", str(target), "--draft", str(target), "--prompt", "x"]
        args += ["--max-new-tokens", "8"]
        code, output = invoke(*args, *extra)
        assert code == 2 and message in output, (message, output)


def test_models_list_shows_the_pair(monkeypatch, tmp_path):
    monkeypatch.setenv(prepared.CACHE_ENV, str(tmp_path))
    code, output = invoke("models", "list")
    assert code == 0
    assert all(name in output for name in prepared.PREPARED)


def test_assembly_checks_the_sha256(monkeypatch, tmp_path):
    parts = [tmp_path / "a.bin", tmp_path / "b.bin"]
    parts[0].write_bytes(b"GGUF" + b"\0" * 100)
    parts[1].write_bytes(b"\1" * 50)
    data = b"".join(p.read_bytes() for p in parts)
    digest = hashlib.sha256(data).hexdigest()
    good = prepared.PreparedSpec("t", "-", "none-", 2, "0", len(data), digest)
    monkeypatch.setattr(prepared, "part_files", lambda spec: parts)
    prepared.assemble_gguf(good, tmp_path / "ok.gguf")
    assert (tmp_path / "ok.gguf").read_bytes() == data
    bad = prepared.PreparedSpec("t", "-", "none-", 2, "0", len(data), "0" * 64)
    with pytest.raises(ValueError, match="sha256"):
        prepared.assemble_gguf(bad, tmp_path / "bad.gguf")
    assert not (tmp_path / "bad.gguf").exists()


def test_missing_part_wheel_is_a_clear_error():
    spec = prepared.PreparedSpec("t", "-", "spec-decode-no-such-part-", 1, "0", 1, "0" * 64)
    with pytest.raises(FileNotFoundError, match="not installed"):
        prepared.part_files(spec)
