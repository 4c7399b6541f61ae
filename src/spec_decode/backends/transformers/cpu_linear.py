"""CPU weight formats for ``nn.Linear`` layers: fp16 weights (for targets) and int8 (for drafts).

On CPU, decoding is bound by reading weights from memory, so smaller weights are faster:

* ``fp16``: weights stored in half precision, activations and accumulation in fp32 (fbgemm's
  ``linear_dynamic_fp16``). A token's output does not depend on the other rows of the block (up to
  float rounding, ~1e-5), so a target scores a drafted block consistently with one-token scoring,
  and a block of 2-8 rows costs barely more than one row.
* ``int8``: int8 weights with per-output-channel scales and dynamically quantized activations
  (fbgemm's ``linear_dynamic``). The activation scale is shared by every row of a call, so a
  token's logits depend on the rest of the block: fine for a draft (its tokens are proposals and
  the sampler reports the distribution they were drawn from), wrong for a target.

These call the quantized kernels directly rather than through the deprecated
``torch.ao.quantization.quantize_dynamic``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch import nn

WEIGHT_FORMATS = ("fp32", "fp16", "int8")


def _pack_fp16(weight: torch.Tensor, bias: torch.Tensor | None) -> object:
    return torch.ops.quantized.linear_prepack_fp16(weight.float(), bias)


def _pack_int8(weight: torch.Tensor, bias: torch.Tensor | None) -> object:
    weight = weight.float()
    scales = (weight.abs().amax(dim=1) / 127.0).clamp_min(1e-12).double()
    zero_points = torch.zeros(weight.shape[0], dtype=torch.long)
    with warnings.catch_warnings():  # fbgemm's int8 kernel still takes a (deprecated) qtensor
        warnings.simplefilter("ignore", UserWarning)
        quantized = torch.quantize_per_channel(weight, scales, zero_points, 0, torch.qint8)
    return torch.ops.quantized.linear_prepack(quantized, bias)


def _run_fp16(x: torch.Tensor, packed: object) -> torch.Tensor:
    return torch.ops.quantized.linear_dynamic_fp16(x, packed)


def _run_int8(x: torch.Tensor, packed: object) -> torch.Tensor:
    return torch.ops.quantized.linear_dynamic(x, packed, True)


_FORMATS: dict[str, tuple[Callable[..., object], Callable[..., torch.Tensor]]] = {
    "fp16": (_pack_fp16, _run_fp16),
    "int8": (_pack_int8, _run_int8),
}


class PackedLinear(nn.Module):
    """A bias-optional linear layer whose weight is pre-packed for a CPU quantized kernel."""

    def __init__(self, linear: nn.Linear, weight_format: str) -> None:
        super().__init__()
        pack, self._run = _FORMATS[weight_format]
        bias = None if linear.bias is None else linear.bias.detach().float()
        self._packed = pack(linear.weight.detach(), bias)
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.weight_format = weight_format

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        out = self._run(x.reshape(-1, shape[-1]).float().contiguous(), self._packed)
        return out.reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, format={self.weight_format}"


def pack_linears(model: nn.Module, weight_format: str) -> nn.Module:
    """Replace every ``nn.Linear`` in ``model`` (in place) by a :class:`PackedLinear`.

    ``"fp32"`` leaves the model as it is. Each original weight is released as soon as its packed
    copy exists, so peak memory stays near the larger of the two formats.
    """
    if weight_format not in WEIGHT_FORMATS:
        raise ValueError(f"unknown weight format {weight_format!r}; known: {WEIGHT_FORMATS}")
    if weight_format == "fp32":
        return model
    targets = [
        (parent, name)
        for parent in model.modules()
        for name, child in parent.named_children()
        if isinstance(child, nn.Linear)
    ]
    for parent, name in targets:
        setattr(parent, name, PackedLinear(getattr(parent, name), weight_format))
    return model
