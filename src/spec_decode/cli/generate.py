"""``spec-decode generate``: exact speculative decoding on real models from the command line.

torch and transformers are imported only when the command runs, so the rest of the CLI starts
fast without the ``[hf]`` extra. Prompts go through the chat template when the target's tokenizer
has one (:mod:`spec_decode.backends.prompts`); ``--raw`` feeds the text as it is. Generation stops
at an end-of-sequence token or after ``--max-new-tokens``.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from spec_decode.backends.calibration import cached_draft_seconds, cost_curve, identity
from spec_decode.backends.loading import (
    Loaded,
    check_pair,
    check_weights,
    choose_backend,
    load,
    resolve_gguf,
)
from spec_decode.backends.prompts import Tokenizer, encode_prompt
from spec_decode.backends.registry import DEFAULT_DRAFT, DEFAULT_TARGET, PREPARED
from spec_decode.cli.models import prepare_with_bar
from spec_decode.cli.options import MinP, Temperature, TopK, TopP, print_json
from spec_decode.core.generate import chain_step, generate, target_step, tree_step
from spec_decode.core.models import Model
from spec_decode.core.protocols import Drafter, KPolicy, TreeDrafter
from spec_decode.core.rules import exact_rule
from spec_decode.core.sampling import SamplingParams
from spec_decode.core.trace import Trace
from spec_decode.core.tree import TreeShape
from spec_decode.core.tree_rules import verify_tree
from spec_decode.drafting.auto import AutoPlanner, auto_planner, auto_step, draft_model_can_pay
from spec_decode.drafting.costs import CostCurve
from spec_decode.drafting.drafters import ModelDrafter
from spec_decode.drafting.lookup import PromptLookupDrafter
from spec_decode.drafting.policies import POLICY_NAMES, policy_by_name
from spec_decode.drafting.tree_drafters import ModelTreeDrafter

if TYPE_CHECKING:
    from collections.abc import Callable


console = Console(stderr=True)


@dataclass
class Run:
    """One generation: its trace, text and wall time."""

    trace: Trace
    text: str
    seconds: float

    def figures(self) -> dict[str, object]:
        trace = self.trace
        return {
            "text": self.text,
            "token_ids": trace.tokens,
            "tokens": len(trace.tokens),
            "seconds": self.seconds,
            "tokens_per_second": len(trace.tokens) / self.seconds if self.seconds else 0.0,
            "target_passes": trace.target_passes,
            "proposed": trace.proposed,
            "accepted": trace.accepted,
            "acceptance_rate": trace.acceptance_rate,
            "tokens_per_pass": trace.tokens_per_pass,
            "steps_by_drafter": dict(Counter(trace.drafter_names)),  # "": plain target pass
        }


def run_generation(
    target: Model,
    drafter: Drafter | TreeDrafter | AutoPlanner | None,
    prompt_ids: list[int],
    max_new_tokens: int,
    k: int | KPolicy,
    sampling: SamplingParams,
    seed: int,
    stop_ids: set[int],
    on_tokens: Callable[[list[int]], None] | None = None,
    tree: TreeShape | None = None,
) -> Trace:
    """Generate up to ``max_new_tokens`` (target-only when ``drafter`` is None), ending right
    after a token in ``stop_ids`` (which is kept). With ``tree``, ``drafter`` is a tree drafter
    and each step drafts a token tree of that shape."""
    if drafter is None:
        step = target_step(target, sampling)
    elif isinstance(drafter, AutoPlanner):
        step = auto_step(target, drafter, sampling)
    elif tree is not None:
        step = tree_step(target, drafter, tree, verify_tree, sampling)
    else:
        policy = policy_by_name("fixed", k) if isinstance(k, int) else k
        step = chain_step(target, drafter, policy, exact_rule, sampling)
    rng = np.random.default_rng(seed)
    return generate(
        target, step, prompt_ids, max_new_tokens, rng, on_tokens=on_tokens, stop_tokens=stop_ids
    )


class _TextStream:
    """Prints decoded text as tokens arrive (holding back an incomplete UTF-8 character)."""

    def __init__(self, tokenizer: Tokenizer, enabled: bool) -> None:
        self.tokenizer, self.enabled = tokenizer, enabled
        self.tokens: list[int] = []
        self.printed = 0

    def __call__(self, tokens: list[int]) -> None:
        self.tokens.extend(tokens)
        text = self.text
        if self.enabled and not text.endswith("\ufffd"):
            sys.stdout.write(text[self.printed :])
            sys.stdout.flush()
            self.printed = len(text)

    @property
    def text(self) -> str:
        return self.tokenizer.decode(self.tokens, skip_special_tokens=True)


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
    k: Annotated[
        int, typer.Option("--k", min=1, help="Tokens drafted per step (auto: the most).")
    ] = 4,
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
    seed: Annotated[int, typer.Option(help="Seed of every random choice.")] = 0,
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
    threads: Annotated[
        int | None, typer.Option(min=1, help="llama.cpp threads (default: every core).")
    ] = None,
    device: Annotated[
        str, typer.Option(help="cpu, or cuda (transformers backend; bf16/fp16/fp32 weights).")
    ] = "cpu",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Generate text with exact speculative decoding on real models (llama.cpp or transformers)."""
    try:
        sampling = SamplingParams(temperature, top_k, top_p, min_p)
        k_policy = k if policy == "auto" else policy_by_name(policy, k)
        shape = TreeShape.parse(tree) if tree is not None else None
        if shape is not None and draft == "lookup":
            raise ValueError("--tree needs a draft model; prompt lookup proposes a single chain")
        if target_weights == "int8":
            raise ValueError("int8 target weights break block/one-token consistency; use fp16")
        text = prompt if prompt is not None else sys.stdin.read()
        chosen = choose_backend(backend, target)
        for weights in (target_weights, draft_weights):  # before anything loads or converts
            check_weights(chosen, weights, device)
        loaded_target = _load(chosen, target, target_weights, threads, device)
        target_model, tokenizer = loaded_target.model, loaded_target.tokenizer
        prompt_ids = encode_prompt(tokenizer, text, raw)
        target_model.check_fits(len(prompt_ids), max_new_tokens)
        drafter: Drafter | TreeDrafter | AutoPlanner | None = None
        draft_load = 0.0
        models = [target_model]
        use_auto = policy == "auto" and shape is None and not no_draft
        costs = cost_curve(chosen, target_model) if use_auto else None
        skip_draft = draft == "lookup" or (
            use_auto and not _draft_may_pay(chosen, draft, threads, costs, k)
        )
        if draft == "lookup" and not no_draft:
            drafter = PromptLookupDrafter(target_model.vocab_size)
        elif not no_draft and not skip_draft:
            loaded_draft = _load(chosen, draft, draft_weights, threads, device)
            draft_model, draft_load = loaded_draft.model, loaded_draft.seconds
            draft_model.check_fits(len(prompt_ids), max_new_tokens)
            check_pair(loaded_target, loaded_draft)
            models.append(draft_model)
            drafter = (
                ModelDrafter(draft_model, sampling, confidence)
                if shape is None
                else ModelTreeDrafter(draft_model, sampling, replacement=False)
            )
        if use_auto:
            model_drafter = drafter if isinstance(drafter, ModelDrafter) else None
            if model_drafter is not None:
                costs = cost_curve(chosen, target_model, model_drafter.model)
            drafter = auto_planner(costs, target_model.vocab_size, model_drafter, k)
    except (ValueError, FileNotFoundError) as error:
        console.print(f"[red]error:[/] {error}")
        raise typer.Exit(2) from error
    stop_ids = set(loaded_target.stop_ids)
    runs: dict[str, Run] = {}
    variants = [("target-only" if no_draft else "speculative", drafter)]
    if compare and not no_draft:
        variants.append(("target-only", None))
    for model in models:  # untimed: the first forward pages the weights in
        model.next_dist(prompt_ids[:1])
    for label, variant_drafter in variants:
        for model in models:  # every timed run reads its prompt from an empty cache
            model.reset()
        stream = _TextStream(tokenizer, enabled=not as_json and not runs)
        start = time.perf_counter()
        trace = run_generation(
            target_model,
            variant_drafter,
            prompt_ids,
            max_new_tokens,
            k_policy,
            sampling,
            seed,
            stop_ids,
            stream,
            shape,
        )
        runs[label] = Run(trace, stream.text, time.perf_counter() - start)
    payload: dict[str, object] = {
        "backend": chosen,
        "target": target,
        "draft": None if no_draft else draft,
        "draft_loaded": len(models) == 2,
        "k": k,
        "policy": policy,
        "tree": tree,
        "sampling": {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p},
        "seed": seed,
        "prompt_tokens": len(prompt_ids),
        "load_seconds": {"target": loaded_target.seconds, "draft": draft_load},
        "runs": {label: run.figures() for label, run in runs.items()},
    }
    if len(runs) == 2:
        spec, base = runs["speculative"], runs["target-only"]
        rates = [run.figures()["tokens_per_second"] for run in (spec, base)]
        payload["speedup"] = rates[0] / rates[1] if rates[1] else float("nan")
        payload["identical_tokens"] = spec.trace.tokens == base.trace.tokens
    if as_json:
        print_json(payload)
        return
    sys.stdout.write("\n")
    _print_summary(payload, runs)


def _draft_may_pay(
    backend: str, draft: str, threads: int | None, costs: CostCurve, k_max: int
) -> bool:
    """Whether the auto policy could ever draft with ``draft`` on this machine, judged before
    loading it from its cached per-token cost (llama.cpp; True when unknown or not believable,
    see cached_draft_seconds: it is then loaded,
    timed and cached, so the next run knows)."""
    if backend != "llama.cpp":
        return True
    from spec_decode.backends.llamacpp import default_threads

    key = identity("llama.cpp", resolve_gguf(draft), threads or default_threads())
    seconds = cached_draft_seconds(key, costs)
    return seconds is None or draft_model_can_pay(costs, seconds, k_max)


def _load(
    backend: str, name_or_path: str, weights: str, threads: int | None, device: str
) -> Loaded:
    """Load one model, preparing a packaged one for transformers with a progress bar first."""
    if backend == "transformers" and name_or_path in PREPARED:
        prepare_with_bar(name_or_path)
    return load(backend, name_or_path, weights=weights, threads=threads, device=device)


def _print_summary(payload: dict[str, object], runs: dict[str, Run]) -> None:
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
            f"{f['tokens_per_pass']:.2f}",
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
