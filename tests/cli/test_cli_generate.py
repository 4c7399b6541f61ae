"""``spec-decode generate`` and ``models`` on tiny models saved to disk (no download)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from typer.testing import CliRunner

from spec_decode.cli.app import app
from spec_decode.cli.options import MAX_PROMPT_BYTES

#: Slow: loads tiny transformers models.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory, tiny_qwen2_folder):
    root = tmp_path_factory.mktemp("models")
    return tiny_qwen2_folder(root / "target", seed=0), tiny_qwen2_folder(root / "draft", seed=1)


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
    assert "tok/s" in output and "accepted" in output


def test_generate_rejects_bad_inputs(tiny_pair, tmp_path, tiny_qwen2_folder):
    target, _ = tiny_pair
    other = tiny_qwen2_folder(tmp_path / "other", seed=2, vocab=11)
    cases = {
        "vocabularies differ": ["--draft", str(other)],
        "nor a packaged model": ["--draft", str(tmp_path / "missing")],
        "context window": ["--max-new-tokens", "100"],
        "prompt is empty": ["--prompt", "", "--raw"],
    }
    for message, extra in cases.items():
        args = ["generate", "--target", str(target), "--draft", str(target), "--prompt", "x"]
        args += ["--max-new-tokens", "8"]
        code, output = invoke(*args, *extra)
        assert code == 2 and message in output, (message, output)


def test_generate_json_schema_constrains_the_answer(tiny_pair, tmp_path):
    pytest.importorskip("llguidance")
    target, draft = tiny_pair
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"enum": [1, 11, 111]}))  # what the word vocabulary can write
    code, output = invoke(
        "generate", "--target", str(target), "--draft", str(draft), "--prompt", "def x ( ) :",
        "--max-new-tokens", "12", "--compare", "--json", "--json-schema", str(schema),
        "--presence-penalty", "0.5",
    )  # fmt: skip
    assert code == 0, output
    payload = json.loads(output[: output.rindex("}") + 1])
    assert payload["identical_tokens"] is True
    assert json.loads(payload["runs"]["speculative"]["text"]) in (1, 11, 111)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not a readable JSON file"),
        ('{"type": "nosuch"}', "does not compile"),
    ],
)
def test_generate_refuses_a_bad_schema_file(tiny_pair, tmp_path, content, message):
    pytest.importorskip("llguidance")
    target, _ = tiny_pair
    schema = tmp_path / "schema.json"
    schema.write_text(content)
    code, output = invoke(
        "generate", "--target", str(target), "--draft", "lookup", "--prompt", "x",
        "--max-new-tokens", "4", "--json-schema", str(schema),
    )  # fmt: skip
    assert code == 2 and message in " ".join(output.split()), output


def test_generate_reads_no_schema_longer_than_a_prompt(tiny_pair, tmp_path):
    target, _ = tiny_pair
    schema = tmp_path / "schema.json"
    schema.write_bytes(b" " * (MAX_PROMPT_BYTES + 1))
    code, output = invoke(
        "generate", "--target", str(target), "--draft", "lookup", "--prompt", "x",
        "--max-new-tokens", "4", "--json-schema", str(schema),
    )  # fmt: skip
    assert code == 2 and "longer than" in " ".join(output.split()), output
