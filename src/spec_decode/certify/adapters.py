"""How the auditor calls the code under test: the rule and drafter adapters.

Real engines' code is written for tensors and for their own calling conventions, so the auditor
meets it half way, in one place:

* a rule whose signature has a ``sampling`` parameter is called with the case's
  :class:`~spec_decode.core.sampling.SamplingParams` (bound with :func:`functools.partial`), so
  greedy or temperature branches are audited as they run;
* a rule may return a list, a numpy array or a torch tensor of token ids (converted here);
* a step with no drafts (the generator's last step when one token remains, in versions that still
  call the rule then) never reaches the audited rule: the adapter samples the target row itself,
  which is what the exact rule does then and what real engines, which never see zero drafts,
  would need. Either way the audited rule only ever sees one or more drafts;
* every call's inputs are kept (copied, formatted only when a crash report asks: formatting them
  on every call cost a quarter of an audit's time), so a crash report can show them.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spec_decode.core.models import MarkovModel
from spec_decode.core.protocols import Drafter
from spec_decode.core.randomness import RandomSource
from spec_decode.core.sampling import SamplingParams
from spec_decode.drafting.drafters import ModelDrafter

DrafterFunction = Callable[..., tuple[list[int], np.ndarray]]


def accepts_sampling(function: Callable[..., Any]) -> bool:
    """Whether ``function`` declares a ``sampling`` parameter (then it is given the controls)."""
    try:
        return "sampling" in inspect.signature(function).parameters
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        return False


def as_tokens(result: Any) -> Any:
    """A rule's return value as a list of ints when it is an integer array or tensor; anything
    else is passed on unchanged for the generator's own checks to judge."""
    if hasattr(result, "detach") and hasattr(result, "cpu"):  # a torch tensor
        result = result.detach().cpu().numpy()
    if isinstance(result, np.ndarray):
        if not np.issubdtype(result.dtype, np.integer):
            raise ValueError(f"the rule returned an array of dtype {result.dtype}, not token ids")
        return [int(t) for t in result.ravel()]
    return result


class _AuditedCall:
    """What both rule adapters share: the audited rule with the case's controls bound, and the
    last call's inputs, kept for a crash report and turned into text only when one asks."""

    def __init__(self, rule: Callable[..., Any], sampling: SamplingParams) -> None:
        self.rule = functools.partial(rule, sampling=sampling) if accepts_sampling(rule) else rule
        self._inputs: dict[str, Any] = {}

    @property
    def last_inputs(self) -> str | None:
        """``name=value, ...`` of the last call, arrays on one line to 4 digits (None before the
        first call)."""
        if not self._inputs:
            return None
        return ", ".join(f"{name}={_text(value)}" for name, value in self._inputs.items())


class AuditedRule(_AuditedCall):
    """The audited chain rule as the generator calls it (see the module docstring)."""

    def __call__(
        self, p: np.ndarray, q: np.ndarray, draft_tokens: Sequence[int], rng: RandomSource
    ) -> list[int]:
        if len(draft_tokens) == 0:
            return [rng.categorical(p[0])]
        self._inputs = {"p": np.array(p), "q": np.array(q), "drafts": list(draft_tokens)}
        return as_tokens(self.rule(p, q, draft_tokens, rng))


class AuditedTreeRule(_AuditedCall):
    """The audited tree rule as the generator calls it: controls bound, output converted."""

    def __call__(self, p: np.ndarray, tree: Any, rng: RandomSource) -> list[int]:
        self._inputs = {"p": np.array(p), "tree tokens": list(tree.tokens)}
        return as_tokens(self.rule(p, tree, rng))


def _text(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return np.array2string(value, precision=4, separator=", ").replace("\n", "")
    return str(value)


def audited_drafter(
    drafter: Drafter | DrafterFunction | None, draft: MarkovModel, sampling: SamplingParams
) -> Drafter:
    """The drafter to run: ours on the case's draft model, the audited object, or the audited
    plain function given the draft model already warped by the case's controls."""
    if drafter is None:
        return ModelDrafter(draft, sampling)
    if hasattr(drafter, "propose"):
        return drafter  # type: ignore[return-value]
    warped = MarkovModel(sampling.warp(draft.rows).reshape(draft.table.shape))
    return _CallableDrafter(drafter, warped, warped.vocab_size)


@dataclass(frozen=True)
class _CallableDrafter:
    """Adapts a plain ``(draft_model, prefix, k, rng)`` function to the drafter interface."""

    function: DrafterFunction
    model: MarkovModel
    vocab_size: int

    def propose(
        self, prefix: Sequence[int], k: int, rng: RandomSource
    ) -> tuple[list[int], np.ndarray]:
        return self.function(self.model, prefix, k, rng)
