"""What the benchmarks that run Hugging Face's own ``generate`` share: counting its forward
passes."""

from __future__ import annotations

import torch


class CallCounter:
    """Counts forward calls of a module (used to read HF generate's target and draft passes)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.calls = 0
        module.register_forward_hook(self._hook)

    def _hook(self, *_: object) -> None:
        self.calls += 1
