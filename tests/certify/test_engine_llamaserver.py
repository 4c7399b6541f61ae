"""llama-server audited end to end on a tiny GGUF. Needs a llama-server binary
(``$SPEC_DECODE_LLAMA_SERVER`` or ``llama-server`` on the PATH); skipped without one, as in CI,
which builds none."""

from __future__ import annotations

import os
import shutil

import pytest

from spec_decode.certify.engine_audit import audit_engine
from spec_decode.core.sampling import SamplingParams

pytest.importorskip("gguf")

BINARY = os.environ.get("SPEC_DECODE_LLAMA_SERVER") or shutil.which("llama-server")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(BINARY is None, reason="no llama-server binary"),
]


#: Draft after a match of one token (every token of the prefix recurs): the default 12-token
#: match would almost never recur on a random model.
NGRAMS_OF_ONE = ("--spec-ngram-simple-size-n", "1", "--spec-ngram-simple-size-m", "4")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from spec_decode.certify.engines_llamacpp import tiny_model_file

    return tiny_model_file(tmp_path_factory.mktemp("llama-server") / "tiny.gguf")


@pytest.mark.parametrize("mode", ["plain", "ngram-simple"])
def test_llama_server_generation_on_a_tiny_model(tiny_model, mode):
    """The plain server against itself must PASS (it checks the adapter: rows read one token at a
    time, seeds, token ids), and so must ngram-simple's sample-and-match on a model whose block
    rows are its one-token rows (f32 weights). 2,000 runs of 3 tokens detect TV >= 0.09 with
    probability 0.99."""
    from spec_decode.certify.engines_llamaserver import LlamaServerEngine

    engine = LlamaServerEngine(
        mode, model=tiny_model, prefix_text="abcde" * 8, min_mass=0.0, options=NGRAMS_OF_ONE
    )
    try:
        report = audit_engine(engine, tokens=3, samples=2000, sampling=SamplingParams(0.8))
    finally:
        engine.close()
    assert report.pooled == 0.0  # nine tokens: every row listed whole
    assert report.verdict == "PASS", report
    if mode == "ngram-simple":
        assert engine.drafted > 0  # a PASS that verified drafts
