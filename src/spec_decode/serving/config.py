"""What an engine loads and how it drafts: :class:`EngineConfig`, the options of
``spec-decode generate`` and ``serve``, checked before anything loads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spec_decode.backends.calibration import MAX_BLOCK, cached_draft_seconds
from spec_decode.backends.calibration_store import identity
from spec_decode.backends.cores import available_cores
from spec_decode.backends.loading import Loaded, check_weights, choose_backend, load, resolve_gguf
from spec_decode.backends.registry import DEFAULT_DRAFT, DEFAULT_TARGET
from spec_decode.core.tree import TreeShape
from spec_decode.drafting.auto import draft_model_can_pay
from spec_decode.drafting.costs import CostCurve
from spec_decode.drafting.policies import POLICY_NAMES
from spec_decode.drafting.rule_choice import DEFAULT_RULE, RuleChoice, rule_by_name
from spec_decode.serving.request import RequestOptions

#: ``draft`` values that load no draft model: prompt lookup, and target-only decoding.
LOOKUP, NO_DRAFT = "lookup", "none"
#: The most tokens a step drafts by default (the auto policy may draft more: :func:`default_k`).
DEFAULT_K = 4


@dataclass(frozen=True)
class EngineConfig:
    """What to load and how to draft (the options of ``spec-decode generate`` and ``serve``).

    ``target`` and ``draft`` are packaged model names, GGUF files or transformers folders;
    ``draft`` may also be ``"lookup"`` (prompt lookup, no draft model) or ``"none"``
    (target-only). ``policy`` is ``"auto"`` (drafter and k from the cost curve; ``k`` is the
    most it drafts) or a k policy name; ``tree`` drafts token trees of that shape instead.
    ``k`` None follows the target's build (:func:`default_k`).
    ``shared_history`` gives the auto policy's suffix drafter the finished requests;
    ``reuse_cache`` lets a request reuse the KV cache the previous one left. ``parallel``
    requests run at once, each on a slot of its own (llama.cpp, chains; see
    :mod:`spec_decode.serving.slots`). A ``draft`` model whose vocabulary is not the target's
    is an error when ``draft_named``; otherwise (the default draft beside a target of another
    family) it is set aside and the engine drafts from the prompt.
    """

    target: str = DEFAULT_TARGET
    draft: str = DEFAULT_DRAFT
    backend: str = "auto"
    policy: str = "auto"
    k: int | None = None
    tree: TreeShape | None = None
    confidence: float = 0.0
    threads: int | None = None
    device: str = "cpu"
    target_weights: str = "fp16"
    draft_weights: str = "int8"
    shared_history: bool = True
    reuse_cache: bool = True
    rule: str = DEFAULT_RULE
    parallel: int = 1
    draft_named: bool = True

    def __post_init__(self) -> None:
        if self.policy != "auto" and self.policy not in POLICY_NAMES:
            raise ValueError(
                f"unknown policy {self.policy!r}; choose auto, {', '.join(POLICY_NAMES)}"
            )
        if self.k is not None and self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if not 0 <= self.confidence <= 1:
            raise ValueError(f"confidence must lie in [0, 1], got {self.confidence}")
        if self.tree is not None and self.draft in (LOOKUP, NO_DRAFT):
            raise ValueError("--tree needs a draft model; prompt lookup proposes a single chain")
        if self.target_weights == "int8":
            raise ValueError("int8 target weights break block/one-token consistency; use fp16")
        rule_by_name(self.rule)  # an unknown rule is refused before anything loads
        if self.parallel < 1:
            raise ValueError(f"parallel must be >= 1, got {self.parallel}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")

    def checked_backend(self) -> str:
        """The backend these models load on, once both weight formats are checked for it
        (``ValueError`` before anything loads or converts)."""
        backend = choose_backend(self.backend, self.target)
        for weights in (self.target_weights, self.draft_weights):
            check_weights(backend, weights, self.device)
        return backend

    def load(
        self, backend: str, name: str, weights: str, slots: int = 1, draft: bool = False
    ) -> Loaded:
        """Load the target or (``draft``) the draft ``name`` with these threads and device, as
        ``slots`` sequences (llama.cpp)."""
        return load(
            backend, name, weights=weights, threads=self.threads, device=self.device,
            draft=draft, slots=slots,
        )  # fmt: skip

    def rule_for(self, options: RequestOptions) -> RuleChoice:
        """The rule a request decodes under: the one it names, else this configuration's."""
        return rule_by_name(options.rule or self.rule)

    @property
    def uses_auto(self) -> bool:
        """Whether the auto policy chooses the drafter and k (it needs the cost curve)."""
        return self.policy == "auto" and self.tree is None and self.draft != NO_DRAFT


def default_k(target: Any, auto: bool) -> int:
    """The most tokens a step drafts when not told: :data:`DEFAULT_K`, except under the auto
    policy on a target whose blocks score exactly beyond that (llama.cpp's exact-rows build):
    as many as the calibrated cost curve covers, since auto then only drafts that far where
    the curve says it pays."""
    exact = getattr(target, "exact_block_size", 1)
    if auto and exact > DEFAULT_K + 1:
        return min(exact, MAX_BLOCK) - 1
    return DEFAULT_K


def draft_may_pay(
    backend: str, draft: str, threads: int | None, costs: CostCurve, k_max: int
) -> bool:
    """Whether the auto policy could ever draft with ``draft`` on this machine, judged before
    loading it from its cached per-token cost (llama.cpp; True when unknown or not believable,
    see :func:`~spec_decode.backends.calibration.cached_draft_seconds`: it is then loaded, timed
    and cached, so the next run knows)."""
    if backend != "llama.cpp":
        return True
    key = identity("llama.cpp", resolve_gguf(draft), threads or available_cores())
    seconds = cached_draft_seconds(key, costs)
    return seconds is None or draft_model_can_pay(costs, seconds, k_max)
