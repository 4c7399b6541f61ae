"""The options that choose and load the engine, declared once for ``generate`` and ``serve``:
the models, the backend and device, how drafting is chosen (policy, k, tree, confidence), the
verification rule, weight formats and threads; :func:`engine_config` checks them into an
:class:`~spec_decode.serving.engine.EngineConfig`."""

from __future__ import annotations

from typing import Annotated

import typer

from spec_decode.cli.options import tree_shape
from spec_decode.cli.rule_option import rule_option
from spec_decode.drafting.policies import POLICY_NAMES
from spec_decode.serving.config import EngineConfig

Target = Annotated[
    str,
    typer.Option(help="Packaged model name, a GGUF file (llama.cpp) or a transformers folder."),
]
Draft = Annotated[
    str,
    typer.Option(
        help="Like --target; or 'lookup' (copies from the prompt and output, no draft model) "
        "or 'none' (target-only)."
    ),
]
Backend = Annotated[
    str,
    typer.Option(
        help="auto (llama.cpp for packaged models and GGUF files when installed), llama.cpp "
        "or transformers."
    ),
]
Policy = Annotated[
    str,
    typer.Option(
        help=f"How each step drafts: auto (by this machine's measured costs), "
        f"{', '.join(POLICY_NAMES)}."
    ),
]
Confidence = Annotated[
    float,
    typer.Option(
        min=0.0, max=1.0, help="Stop drafting where the draft's top probability is below this."
    ),
]
Tree = Annotated[
    str | None,
    typer.Option(
        help="Draft token trees of this shape, children per node by depth, e.g. 2,2 (replaces "
        "--k and --policy)."
    ),
]
TargetWeights = Annotated[str, typer.Option(help="fp16 (exact block scores) or fp32.")]
DraftWeights = Annotated[str, typer.Option(help="int8 (cheapest), fp16 or fp32.")]
Device = Annotated[
    str, typer.Option(help="cpu, or cuda (transformers backend; bf16/fp16/fp32 weights).")
]
NoBuild = Annotated[
    bool,
    typer.Option(
        "--no-build",
        envvar="SPEC_DECODE_NO_BUILD",
        help="Refuse, instead of building llama.cpp's kernels when missing (3 minutes).",
    ),
]


def engine_config(
    context: typer.Context,
    *,
    target: str,
    draft: str,
    backend: str,
    policy: str,
    k: int | None,
    tree: str | None,
    confidence: float,
    rule: str,
    target_weights: str,
    draft_weights: str,
    threads: int | None,
    device: str,
    shared_history: bool = True,
    parallel: int = 1,
) -> EngineConfig:
    """The engine these options of the command run in ``context`` describe; a malformed
    ``--tree`` or ``--rule`` is a usage error (exit 2), and a combination the engine refuses a
    ``ValueError``."""
    shape = None if tree is None else tree_shape(tree, _max_leaves(backend, target))
    rule_option(rule)
    return EngineConfig(
        target=target, draft=draft, backend=backend, policy=policy, k=k, tree=shape,
        confidence=confidence, threads=threads, device=device, target_weights=target_weights,
        draft_weights=draft_weights, rule=rule, shared_history=shared_history, parallel=parallel,
        draft_named=given(context, "draft"),
    )  # fmt: skip


def given(context: typer.Context, option: str) -> bool:
    """Whether the user gave ``option`` (on the command line or in the environment) rather than
    leaving its default. Asked of the command's own context: Typer may run on a copy of Click of
    its own, whose current context Click's ``get_current_context`` does not see."""
    source = context.get_parameter_source(option)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def _max_leaves(backend: str, target: str) -> int | None:
    """The most root-to-leaf paths the chosen backend verifies in one pass (llama.cpp: one
    sequence per path), so a tree too wide for it is refused before anything loads."""
    from spec_decode.backends.loading import choose_backend

    if choose_backend(backend, target) != "llama.cpp":
        return None
    from spec_decode.backends.llamacpp.model import DEFAULT_TREE_LEAVES

    return DEFAULT_TREE_LEAVES
