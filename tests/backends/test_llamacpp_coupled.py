"""The coupled rule on the llama.cpp backend's tiny random GGUF models: speculative output equals
target-only output for every seed at T = 0.7 and 1 (the backend scores drafted blocks bitwise
equal to one-token rows, so the target's noisy choice is the same number both ways)."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")

from test_llamacpp import open_model, perturbed, prompts, tiny_weights, write_gguf

from spec_decode import SamplingParams
from spec_decode.certify.identity import identity_certificate, target_only_run
from spec_decode.certify.zoo.positional import StepRelativeNoise
from spec_decode.core.coupled import coupled_rule
from spec_decode.drafting.speculative import generate_speculative


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gguf-coupled")
    weights = tiny_weights(0, logit_scale=3.0)
    target = open_model(write_gguf(folder / "target.gguf", weights))
    draft = open_model(write_gguf(folder / "draft.gguf", perturbed(weights, 1, 0.3)))
    return target, draft


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_coupled_llamacpp_output_is_target_only_output(pair, temperature):
    target, draft = pair
    sampling = SamplingParams(temperature)
    for prompt in prompts(1, seed=5):
        for k in (1, 4):

            def speculative(source, n, prompt=prompt, k=k):
                return generate_speculative(
                    target, draft, prompt, n, k, source, sampling=sampling, rule=coupled_rule
                )

            certificate = identity_certificate(
                speculative, target_only_run(target, prompt, sampling), range(6), 12
            )
            assert certificate.passed, (prompt, k, certificate.mismatched)
            assert certificate.exercised, (prompt, k, certificate)


def test_step_relative_noise_fails_identity_on_llamacpp(pair):
    target, draft = pair
    sampling = SamplingParams(1.0)
    prompt = prompts(1, seed=5)[0]

    def broken(source, n):
        return generate_speculative(
            target,
            draft,
            prompt,
            n,
            3,
            StepRelativeNoise(source),
            sampling=sampling,
            rule=coupled_rule,
        )

    certificate = identity_certificate(
        broken, target_only_run(target, prompt, sampling), range(6), 12
    )
    assert not certificate.passed
