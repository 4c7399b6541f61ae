"""``spec-decode generate``: exact speculative decoding on real models from the command line.

The command parses its options, has the engine (:mod:`spec_decode.serving.engine`) load the
models and generate, and prints. torch and transformers are imported only when a model is
loaded, so the rest of the CLI starts fast without the ``[hf]`` extra. Prompts go through the
chat template when the target's tokenizer has one; ``--raw`` feeds the text as it is.
Generation stops at an end-of-generation token or after ``--max-new-tokens``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from spec_decode.backends.registry import DEFAULT_DRAFT, DEFAULT_TARGET, PREPARED
from spec_decode.cli import preflight
from spec_decode.cli.engine_options import (
    Backend,
    Confidence,
    Device,
    Draft,
    DraftWeights,
    NoBuild,
    Policy,
    Target,
    TargetWeights,
    Tree,
    engine_config,
)
from spec_decode.cli.models import prepare_with_bar
from spec_decode.cli.options import (
    MAX_PROMPT_BYTES,
    EngineK,
    MinP,
    Seed,
    Temperature,
    Threads,
    TopK,
    TopP,
    print_json,
    print_load_notes,
    prompt_text,
)
from spec_decode.cli.rule_option import DEFAULT_RULE, RuleOption
from spec_decode.constraints.formats import output_grammar
from spec_decode.core.processors import Penalties
from spec_decode.core.sampling import SamplingParams
from spec_decode.serving.completion import Completion, Piece
from spec_decode.serving.config import LOOKUP, NO_DRAFT, EngineConfig
from spec_decode.serving.engine import Engine
from spec_decode.serving.request import GenerationRequest, RequestOptions

console = Console(stderr=True)


def generate_command(
    context: typer.Context,
    prompt: Annotated[
        str | None, typer.Option(help="The prompt (read from standard input if omitted).")
    ] = None,
    target: Target = DEFAULT_TARGET,
    draft: Draft = DEFAULT_DRAFT,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="The most tokens to generate.")] = 128,
    k: EngineK = None,
    policy: Policy = "auto",
    confidence: Confidence = 0.0,
    tree: Tree = None,
    temperature: Temperature = 0.0,
    top_k: TopK = None,
    top_p: TopP = 1.0,
    min_p: MinP = 0.0,
    seed: Seed = 0,
    rule: RuleOption = DEFAULT_RULE,
    no_draft: Annotated[bool, typer.Option("--no-draft", help="Target-only decoding.")] = False,
    compare: Annotated[bool, typer.Option("--compare", help="Also time target-only.")] = False,
    raw: Annotated[bool, typer.Option("--raw", help="Do not apply the chat template.")] = False,
    target_weights: TargetWeights = "fp16",
    draft_weights: DraftWeights = "int8",
    backend: Backend = "auto",
    threads: Threads = None,
    device: Device = "cpu",
    json_schema: Annotated[
        Path | None,
        typer.Option(help="Constrain the answer to a document of this JSON schema (a file)."),
    ] = None,
    frequency_penalty: Annotated[
        float, typer.Option(help="Subtract this times a token's count so far from its logit.")
    ] = 0.0,
    presence_penalty: Annotated[
        float, typer.Option(help="Subtract this from the logit of every token seen so far.")
    ] = 0.0,
    no_build: NoBuild = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Generate text with exact speculative decoding on real models (llama.cpp or transformers)."""
    _check_no_draft(no_draft, draft)
    try:
        sampling = SamplingParams(temperature, top_k, top_p, min_p)
        config = engine_config(
            context, target=target, draft=NO_DRAFT if no_draft else draft, backend=backend,
            policy=policy, k=k, tree=tree, confidence=confidence, rule=rule,
            target_weights=target_weights, draft_weights=draft_weights, threads=threads,
            device=device,
        )  # fmt: skip
        text = prompt_text(prompt)
        penalties = Penalties(frequency_penalty, presence_penalty)
        grammar = None if json_schema is None else _grammar(json_schema)
        preflight.ready(config, no_build)
        _prepare_packaged(config)
        engine = Engine.load(config)
        if not as_json:
            print_load_notes(engine)
        options = RequestOptions(sampling, seed, penalties=penalties, grammar=grammar)
        request = engine.prepare(text, options, max_tokens=max_new_tokens, raw=raw)
    except (ValueError, FileNotFoundError) as error:
        preflight.fail(error)
    runs = _run(engine, request, no_draft=no_draft, compare=compare, stream=not as_json)
    asked = {"target": target, "draft": None if no_draft else draft, "policy": policy, "tree": tree}
    asked |= {"seed": seed, "rule": rule, "json_schema": json_schema and str(json_schema)}
    payload = _payload(engine, request, runs, asked, sampling, penalties)
    if as_json:
        print_json(payload)
        return
    sys.stdout.write("\n")
    _print_summary(payload, runs)


def _check_no_draft(no_draft: bool, draft: str) -> None:
    """``--no-draft`` with a ``--draft`` is a contradiction (one of them would be dropped)."""
    if no_draft and draft not in (DEFAULT_DRAFT, NO_DRAFT):
        raise typer.BadParameter(
            f"--no-draft decodes without a drafter, --draft {draft} drafts: give one of them",
            param_hint="--no-draft",
        )


def _payload(
    engine: Engine,
    request: GenerationRequest,
    runs: dict[str, Completion],
    asked: dict[str, object],
    sampling: SamplingParams,
    penalties: Penalties,
) -> dict[str, object]:
    """What was asked (the options in ``asked``, the sampling controls and penalties), what was
    loaded, and what was measured (:func:`_figures`): the ``--json`` object."""
    return {
        "backend": engine.backend,
        **{key: asked[key] for key in ("target", "draft")},
        "drafting": engine.config.draft,  # as loaded: "lookup" where the draft was set aside
        "draft_loaded": engine.draft is not None,
        "k": engine.k,
        **{key: asked[key] for key in ("policy", "tree", "seed", "rule")},
        "sampling": {
            "temperature": sampling.temperature,
            "top_k": sampling.top_k,
            "top_p": sampling.top_p,
            "min_p": sampling.min_p,
        },
        "penalties": {"frequency": penalties.frequency, "presence": penalties.presence},
        "json_schema": asked["json_schema"],
        **_figures(engine, request, runs),
    }


def _run(
    engine: Engine, request: GenerationRequest, *, no_draft: bool, compare: bool, stream: bool
) -> dict[str, Completion]:
    """The request decoded as asked (and target-only too with ``compare``), each from an empty
    cache; the first run's text printed as it comes with ``stream``."""
    variants = [("target-only" if no_draft else "speculative", no_draft)]
    if compare and not no_draft:
        variants.append(("target-only", True))
    engine.warm_up()
    runs: dict[str, Completion] = {}
    for label, target_only in variants:
        engine.forget()  # every timed run reads its prompt from an empty cache
        on_step = _print_text if stream and not runs else None
        run = request.target_only() if target_only else request
        runs[label] = engine.generate(run, on_step=on_step)
    return runs


def _figures(
    engine: Engine, request: GenerationRequest, runs: dict[str, Completion]
) -> dict[str, object]:
    """What was measured: prompt length, load times, each run's figures and, beside
    target-only, the speedup and whether the tokens are identical."""
    figures: dict[str, object] = {
        "prompt_tokens": len(request.prompt),
        "load_seconds": {
            "target": engine.target.seconds,
            "draft": engine.draft.seconds if engine.draft else 0.0,
        },
        "runs": {label: run.figures() for label, run in runs.items()},
        "exact_rows": _exact_rows(engine),
    }
    if len(runs) == 2:
        spec, base = (runs[label].figures() for label in ("speculative", "target-only"))
        rates = [float(f["tokens_per_second"]) for f in (spec, base)]  # type: ignore[arg-type]
        figures["speedup"] = rates[0] / rates[1] if rates[1] else float("nan")
        figures["identical_tokens"] = spec["token_ids"] == base["token_ids"]
    return figures


def _exact_rows(engine: Engine) -> dict[str, object] | None:
    """The llama.cpp target's exact block size and why (None on the transformers backend)."""
    rows = getattr(engine.target.model, "exact_rows", None)
    return None if rows is None else rows.report()


def read_schema(path: Path) -> dict[str, Any]:
    """The JSON schema in the file ``path`` (a ``ValueError`` naming the file otherwise), read
    no further than :data:`MAX_PROMPT_BYTES`: a wrong file fails at once instead of filling
    memory."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_PROMPT_BYTES + 1)
        if len(data) > MAX_PROMPT_BYTES:
            raise ValueError(f"--json-schema {path}: longer than {MAX_PROMPT_BYTES:,} bytes")
        schema = json.loads(data.decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"--json-schema {path}: not a readable JSON file ({error})") from error
    if not isinstance(schema, dict):
        raise ValueError(f"--json-schema {path}: a schema is a JSON object")
    return schema


def _grammar(path: Path) -> Any:
    """The grammar of ``--json-schema``: the file read, then llguidance asked (``[serve]``)."""
    schema = read_schema(path)
    preflight.require("serve", ("llguidance",), "--json-schema")
    return output_grammar(answer=schema)


def _print_text(piece: Piece) -> None:
    """Print a step's text as soon as it is final."""
    sys.stdout.write(piece.text)
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
    # short headers: the table fits 80 columns whole (Rich would cut a header to fit)
    for column in ("run", "tokens", "tok/s", "passes", "accepted", "tok/pass", "wall s"):
        table.add_column(column, justify="right", no_wrap=True)
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
    console.print("passes: target passes; accepted: the share of drafted tokens accepted")
    model_draft = payload["drafting"] not in (LOOKUP, NO_DRAFT)
    if payload["policy"] == "auto" and model_draft and not payload["draft_loaded"]:
        console.print(
            "draft model not used: on this machine's calibrated costs it cannot pay even "
            "with every draft accepted (auto drafts from prompt lookup and suffixes only)"
        )
    if "speedup" in payload:
        same = "identical" if payload["identical_tokens"] else "different (sampling, or a near-tie)"
        console.print(f"speedup {payload['speedup']:.2f}x in tokens/s; token sequences {same}")
