"""``spec-decode generate``: exact speculative decoding on real models from the command line.

The command parses its options, has the engine (:mod:`spec_decode.serving.engine`) load the
models and generate, and prints. torch and transformers are imported only when a model is
loaded, so the rest of the CLI starts fast without the ``[hf]`` extra. Prompts go through the
chat template when the target's tokenizer has one; ``--raw`` feeds the text as it is.
Generation stops at an end-of-generation token or after ``--max-new-tokens``.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from spec_decode.backends.registry import DEFAULT_DRAFT, DEFAULT_TARGET, PREPARED
from spec_decode.cli.models import prepare_with_bar
from spec_decode.cli.options import (
    EngineK,
    MinP,
    Seed,
    Temperature,
    Threads,
    TopK,
    TopP,
    print_json,
    prompt_text,
    tree_shape,
)
from spec_decode.cli.rule_option import DEFAULT_RULE, RuleOption, rule_option
from spec_decode.core.sampling import SamplingParams
from spec_decode.drafting.policies import POLICY_NAMES
from spec_decode.serving.engine import LOOKUP, NO_DRAFT, Completion, Engine, EngineConfig

console = Console(stderr=True)


def generate_command(
    prompt: Annotated[
        str | None, typer.Option(help="The prompt (read from standard input if omitted).")
    ] = None,
    target: Annotated[
        str,
        typer.Option(help="Packaged model name, a GGUF file (llama.cpp) or a transformers folder."),
    ] = DEFAULT_TARGET,
    draft: Annotated[
        str,
        typer.Option(
            help="Packaged model name, GGUF file or transformers folder, or 'lookup' (prompt "
            "lookup: drafts copied from the prompt and output, no draft model)."
        ),
    ] = DEFAULT_DRAFT,
    max_new_tokens: Annotated[int, typer.Option(min=1)] = 128,
    k: EngineK = None,
    policy: Annotated[
        str,
        typer.Option(
            help=f"How k is chosen before each step: auto, {', '.join(POLICY_NAMES)}. auto picks "
            "a plain pass, prompt lookup, the suffix drafter or the draft model and k by expected "
            "tokens per second on this machine's calibrated cost curve (see calibrate); adaptive "
            "ones start at --k; cost measures the draft/target cost ratio as it goes."
        ),
    ] = "auto",
    confidence: Annotated[
        float,
        typer.Option(
            min=0.0, max=1.0, help="Stop drafting where the draft model's top probability is below."
        ),
    ] = 0.0,
    tree: Annotated[
        str | None,
        typer.Option(
            help="Draft a token tree instead of a chain: children per node, depth by depth, e.g. "
            "2,2 (siblings drawn without replacement; replaces --k and --policy)."
        ),
    ] = None,
    temperature: Temperature = 0.0,
    top_k: TopK = None,
    top_p: TopP = 1.0,
    min_p: MinP = 0.0,
    seed: Seed = 0,
    rule: RuleOption = DEFAULT_RULE,
    no_draft: Annotated[bool, typer.Option(help="Target-only decoding.")] = False,
    compare: Annotated[bool, typer.Option(help="Also run target-only and compare.")] = False,
    raw: Annotated[bool, typer.Option(help="Do not apply the chat template.")] = False,
    target_weights: Annotated[
        str, typer.Option(help="fp16 (exact block scores) or fp32.")
    ] = "fp16",
    draft_weights: Annotated[str, typer.Option(help="int8 (cheapest), fp16 or fp32.")] = "int8",
    backend: Annotated[
        str,
        typer.Option(
            help="auto (llama.cpp for packaged models and GGUF files when the llama extra is "
            "installed, else transformers), llama.cpp or transformers."
        ),
    ] = "auto",
    threads: Threads = None,
    device: Annotated[
        str, typer.Option(help="cpu, or cuda (transformers backend; bf16/fp16/fp32 weights).")
    ] = "cpu",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Generate text with exact speculative decoding on real models (llama.cpp or transformers)."""
    try:
        sampling = SamplingParams(temperature, top_k, top_p, min_p)
        shape = None if tree is None else tree_shape(tree, _max_leaves(backend, target))
        rule_option(rule)
        config = EngineConfig(
            target=target, draft=NO_DRAFT if no_draft else draft, backend=backend,
            policy=policy, k=k, tree=shape,
            confidence=confidence, threads=threads, device=device,
            target_weights=target_weights, draft_weights=draft_weights, rule=rule,
        )  # fmt: skip
        text = prompt_text(prompt)
        _prepare_packaged(config)
        engine = Engine.load(config)
        prompt_ids = engine.encode(text, raw)
        engine.check_fits(len(prompt_ids), max_new_tokens)
    except (ValueError, FileNotFoundError) as error:
        console.print(f"[red]error:[/] {error}")
        raise typer.Exit(2) from error
    variants = [("target-only" if no_draft else "speculative", no_draft)]
    if compare and not no_draft:
        variants.append(("target-only", True))
    engine.warm_up()
    runs: dict[str, Completion] = {}
    for label, target_only in variants:
        engine.forget()  # every timed run reads its prompt from an empty cache
        stream = _print_text if not as_json and not runs else None
        runs[label] = engine.generate(
            prompt_ids, max_new_tokens, sampling=sampling, seed=seed, on_step=stream,
            target_only=target_only,
        )  # fmt: skip
    payload: dict[str, object] = {
        "backend": engine.backend,
        "target": target,
        "draft": None if no_draft else draft,
        "draft_loaded": engine.draft is not None,
        "k": engine.k,
        "policy": policy,
        "tree": tree,
        "sampling": {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p},
        "seed": seed,
        "rule": rule,
        "prompt_tokens": len(prompt_ids),
        "load_seconds": {
            "target": engine.target.seconds,
            "draft": engine.draft.seconds if engine.draft else 0.0,
        },
        "runs": {label: run.figures() for label, run in runs.items()},
    }
    if len(runs) == 2:
        spec, base = (runs[label].figures() for label in ("speculative", "target-only"))
        rates = [float(f["tokens_per_second"]) for f in (spec, base)]  # type: ignore[arg-type]
        payload["speedup"] = rates[0] / rates[1] if rates[1] else float("nan")
        payload["identical_tokens"] = spec["token_ids"] == base["token_ids"]
    if as_json:
        print_json(payload)
        return
    sys.stdout.write("\n")
    _print_summary(payload, runs)


def _max_leaves(backend: str, target: str) -> int | None:
    """The most root-to-leaf paths the chosen backend verifies in one pass (llama.cpp: one
    sequence per path), so a tree too wide for it is refused before anything loads."""
    from spec_decode.backends.loading import choose_backend

    if choose_backend(backend, target) != "llama.cpp":
        return None
    from spec_decode.backends.llamacpp.model import DEFAULT_TREE_LEAVES

    return DEFAULT_TREE_LEAVES


def _print_text(tokens: list[int], text: str) -> None:
    """Print a step's text as soon as it is final."""
    sys.stdout.write(text)
    sys.stdout.flush()


def _prepare_packaged(config: EngineConfig) -> None:
    """Convert a packaged model for transformers once, with a progress bar, before loading."""
    if config.checked_backend() != "transformers":
        return
    for name in (config.target, config.draft):
        if name not in (LOOKUP, NO_DRAFT) and name in PREPARED:
            prepare_with_bar(name)


def _print_summary(payload: dict[str, object], runs: dict[str, Completion]) -> None:
    drafting = f"tree {payload['tree']}" if payload["tree"] else f"k = {payload['k']}"
    title = f"{payload['backend']}, {drafting}, prompt {payload['prompt_tokens']} tokens"
    table = Table(title=title)
    for column in (
        "run",
        "tokens",
        "tokens/s",
        "target passes",
        "acceptance",
        "tokens/pass",
        "wall s",
    ):
        table.add_column(column, justify="right")
    for label, run in runs.items():
        f = run.figures()
        table.add_row(
            label,
            str(f["tokens"]),
            f"{f['tokens_per_second']:.2f}",
            str(f["target_passes"]),
            f"{f['acceptance_rate']:.3f}" if f["proposed"] else "-",
            f"{f['tokens_per_pass']:.2f}" if f["target_passes"] else "-",
            f"{f['seconds']:.1f}",
        )
    console.print(table)
    model_draft = payload["draft"] not in (None, "lookup")
    if payload["policy"] == "auto" and model_draft and not payload["draft_loaded"]:
        console.print(
            "draft model not loaded: on this machine's calibrated costs it cannot pay even "
            "with every draft accepted (auto drafts from prompt lookup and suffixes only)"
        )
    if "speedup" in payload:
        same = "identical" if payload["identical_tokens"] else "different (sampling, or a near-tie)"
        console.print(f"speedup {payload['speedup']:.2f}x in tokens/s; token sequences {same}")
