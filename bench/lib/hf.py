"""What the benchmarks that run Hugging Face's own ``generate`` share: counting its forward
passes, and one timed run of it."""

from __future__ import annotations

import time

import torch

from bench.lib.records import RunRecord, hf_record
from spec_decode.backends.transformers import TransformersModel


class CallCounter:
    """Counts forward calls of a module (used to read HF generate's target and draft passes)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.calls = 0
        module.register_forward_hook(self._hook)

    def _hook(self, *_: object) -> None:
        self.calls += 1


def synchronize(device: str) -> None:
    """Wait for the GPU's queued work (nothing to wait for on the CPU)."""
    if device == "cuda":
        torch.cuda.synchronize()


def run_hf(
    target: TransformersModel,
    assistant: TransformersModel | None,
    counters: dict[str, CallCounter],
    ids: list[int],
    temperature: float,
    tokens: int,
    seed: int,
) -> RunRecord:
    """One ``model.generate`` run (assisted when ``assistant`` is given), timed with the device
    synchronized at both ends.

    Both models get a fresh default generation config first: no end-of-sequence id (exactly
    ``tokens`` new tokens, like ours), no sampling defaults from the checkpoint (a Qwen
    checkpoint's top_k, top_p and repetition penalty would change the distribution), and
    nothing HF's assisted generation adjusts carried over from an earlier run."""
    from transformers import GenerationConfig

    for model in (target, assistant):
        if model is not None:
            model.model.generation_config = GenerationConfig()
    sampling: dict[str, object] = {"do_sample": False}
    if temperature > 0:
        sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    config = GenerationConfig(max_new_tokens=tokens, **sampling)
    input_ids = torch.tensor([ids], device=target.device)
    torch.manual_seed(seed)
    before = {name: counter.calls for name, counter in counters.items()}
    synchronize(target.device.type)
    start = time.perf_counter()
    with torch.inference_mode():
        out = target.model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            generation_config=config,
            assistant_model=None if assistant is None else assistant.model,
        )
    synchronize(target.device.type)
    seconds = time.perf_counter() - start
    passes = counters["target"].calls - before["target"]
    draft_calls = counters["draft"].calls - before["draft"]
    return hf_record(out[0, len(ids) :].tolist(), seconds, passes, draft_calls)
