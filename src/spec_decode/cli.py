"""The ``spec-decode`` command line: a thin layer over the library."""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from spec_decode.audit import AuditReport, audit
from spec_decode.cli_generate import generate, models_app
from spec_decode.exhaustive import DEFAULT_CASES, FULL_CASES, certify_exhaustive
from spec_decode.experiments import DEFAULT_AGREEMENTS, ToySetup, run_experiment, sweep
from spec_decode.policies import POLICY_NAMES
from spec_decode.proof import TV_TOLERANCE, certify_closed_form
from spec_decode.sampling import SamplingParams
from spec_decode.theory import optimal_k
from spec_decode.tree import TreeShape
from spec_decode.tree_experiments import TreeRunResult, run_tree_experiment

app = typer.Typer(
    help="Exact speculative decoding, certified by running code.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()

Seed = Annotated[int, typer.Option(help="Seed of every random choice; same seed, same output.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text.")]
K = Annotated[int, typer.Option("--k", min=1, help="Tokens drafted per step (k >= 1).")]
Tokens = Annotated[int, typer.Option(min=1, help="Tokens to generate.")]
Vocab = Annotated[int, typer.Option(min=2, help="Vocabulary size of the toy models.")]
DraftCost = Annotated[
    float, typer.Option(min=0.0, help="Cost of one draft call, in target passes (cost model).")
]


def _print_json(payload: dict) -> None:
    """JSON with NaN and infinities written as null, so any parser accepts it."""

    def clean(value: object) -> object:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {key: clean(item) for key, item in value.items()}
        if isinstance(value, list):
            return [clean(item) for item in value]
        return value

    typer.echo(json.dumps(clean(payload), indent=2))


@contextmanager
def _progress(description: str, total: int, enabled: bool) -> Iterator[Callable[[], None]]:
    """A Rich progress bar (silent when ``enabled`` is False); yields the advance callback."""
    with Progress(console=console, transient=True, disable=not enabled) as progress:
        task = progress.add_task(description, total=total)
        yield lambda: progress.advance(task)


@app.command()
def verify(
    pairs: Annotated[int, typer.Option(min=1, help="Random (p, q) pairs to check.")] = 10_000,
    exhaustive: Annotated[
        bool,
        typer.Option(
            "--exhaustive",
            help="Enumerate the generator on the full grid (vocabularies 2-4, k 1-3, orders 1-2, "
            "every sampling control; about two minutes) instead of the quick default grid.",
        ),
    ] = False,
    seed: Seed = 0,
    as_json: AsJson = False,
) -> None:
    """Certify exactness: closed form over random pairs, and the generator itself enumerated."""
    with _progress("closed form over random (p, q) pairs", pairs, not as_json) as advance:
        closed = certify_closed_form(pairs, seed, on_progress=advance)
    cases = FULL_CASES if exhaustive else DEFAULT_CASES
    with _progress("enumerating the generator", len(cases), not as_json) as advance:
        enumerated = certify_exhaustive(cases, seed, on_progress=advance)
    passed = closed.passed and enumerated.passed
    if as_json:
        _print_json(
            {
                "max_tv": closed.max_tv,
                "pairs": closed.pairs,
                "exhaustive_tv": enumerated.max_tv,
                "paths": enumerated.paths,
                "exhaustive_cases": enumerated.cases,
                "pass": passed,
            }
        )
    else:
        console.print(
            f"closed form: max total-variation distance (induced vs target) over "
            f"{closed.pairs:,} random (p, q) pairs: {closed.max_tv:.3g} "
            f"(worst family: {closed.worst_family})"
        )
        console.print(
            f"exhaustive:  max total-variation distance (generator vs target) over "
            f"{enumerated.cases} enumerated cases, {enumerated.paths:,} execution paths: "
            f"{enumerated.max_tv:.3g}"
        )
        console.print(f"tolerance {TV_TOLERANCE:g}")
        if passed:
            console.print("[green]PASS[/] — the emitted distribution equals the target's, exactly.")
        else:
            console.print("[red]FAIL[/] — the emitted distribution differs from the target's.")
    if not passed:
        raise typer.Exit(1)


@app.command()
def run(
    agreement: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Draft agreement a: q = a p + (1 - a) r.")
    ] = 0.8,
    k: K = 4,
    policy: Annotated[
        str,
        typer.Option(
            help=f"How k is chosen before each step, one of {', '.join(POLICY_NAMES)}: fixed; "
            "schedule (+2 after a fully accepted step, -1 after a rejection); cost (the k of best "
            "expected speedup at the running alpha and --draft-cost). Adaptive ones start at --k.",
        ),
    ] = "fixed",
    k_max: Annotated[int, typer.Option(min=1, help="Largest k an adaptive policy may pick.")] = 16,
    confidence: Annotated[
        float,
        typer.Option(
            min=0.0, max=1.0, help="Stop drafting where the draft's top probability is below this."
        ),
    ] = 0.0,
    tree: Annotated[
        str | None,
        typer.Option(
            help="Draft a token tree instead of a chain: children per node, depth by depth, "
            "e.g. 3,2,1 (replaces --k).",
        ),
    ] = None,
    without_replacement: Annotated[
        bool,
        typer.Option("--without-replacement", help="Draw a tree's siblings without replacement."),
    ] = False,
    tokens: Tokens = 5000,
    draft_cost: DraftCost = 0.1,
    vocab: Vocab = 32,
    order: Annotated[int, typer.Option(min=1, help="Markov order of the toy models.")] = 1,
    temperature: Annotated[float, typer.Option(min=0.0, help="0 means greedy.")] = 1.0,
    top_k: Annotated[int | None, typer.Option(min=1)] = None,
    top_p: Annotated[float, typer.Option(min=0.0, max=1.0)] = 1.0,
    min_p: Annotated[float, typer.Option(min=0.0, max=1.0)] = 0.0,
    seed: Seed = 0,
    as_json: AsJson = False,
) -> None:
    """Generate from a toy Markov pair; measured figures next to the exact expectation."""
    if tree is not None:
        try:
            tree_result = run_tree_experiment(
                ToySetup(vocab_size=vocab, order=order, seed=seed),
                agreement,
                TreeShape.parse(tree),
                tokens,
                draft_cost,
                seed,
                SamplingParams(temperature, top_k, top_p, min_p),
                replacement=not without_replacement,
            )
        except ValueError as error:
            raise typer.BadParameter(str(error)) from error
        _print_tree_run(tree_result, vocab, order, seed, as_json)
        return
    try:
        sampling = SamplingParams(temperature, top_k, top_p, min_p)
        result = run_experiment(
            ToySetup(vocab_size=vocab, order=order, seed=seed),
            agreement,
            k,
            tokens,
            draft_cost,
            seed,
            sampling,
            policy=policy,
            k_max=k_max,
            min_confidence=confidence,
        )
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    if as_json:
        _print_json(result.to_dict())
        return
    console.print(
        f"generated {result.tokens} tokens  (draft agreement {agreement:g}, k={k}, "
        f"vocabulary {vocab}, order {order}, seed {seed})"
    )
    adaptive = policy != "fixed" or confidence > 0
    if adaptive:
        console.print(f"policy {policy} (k_max {k_max}), confidence cut-off {confidence:g}")
    table = Table(
        "figure",
        "measured",
        f"exact Markov, fixed k={k}" if adaptive else "expected (exact Markov)",
    )
    table.add_row("target passes", f"{result.target_passes}", f"(target-only: {result.tokens})")
    table.add_row("draft calls", f"{result.draft_calls}", "")
    table.add_row(
        "acceptance rate (accepted / drafted)",
        f"{result.acceptance_rate:.3f}",
        f"{result.expected_acceptance_rate:.3f}",
    )
    table.add_row(
        "tokens / target pass",
        f"{result.tokens_per_pass:.3f}",
        f"{result.expected_tokens_per_pass:.3f}",
    )
    table.add_row(
        f"speedup (draft cost {draft_cost:g}x)",
        f"{result.speedup:.2f}x",
        f"{result.expected_speedup:.2f}x",
    )
    console.print(table)
    console.print(
        f"alpha (stationary acceptance probability) = {result.alpha:.3f}; the i.i.d. formula "
        f"(1 - a^(k+1)) / (1 - a) at that alpha gives {result.iid_tokens_per_pass:.3f} tokens "
        f"per pass; optimal k at this alpha and cost: {optimal_k(result.alpha, draft_cost)}"
    )
    console.print(f"accepted drafts per step (0..k): {result.acceptance_histogram}")


def _print_tree_run(
    result: TreeRunResult, vocab: int, order: int, seed: int, as_json: bool
) -> None:
    """``run --tree``: measured figures beside the exact tree theory and the equal-size chain."""
    if as_json:
        _print_json(result.to_dict())
        return
    shape, nodes = ",".join(map(str, result.widths)), result.drafted_per_step
    console.print(
        f"generated {result.tokens} tokens  (draft agreement {result.agreement:g}, tree {shape} "
        f"{'with' if result.replacement else 'without'} replacement: {nodes} drafted tokens and "
        f"{result.draft_calls_per_step} draft calls per step, vocabulary {vocab}, order {order}, "
        f"seed {seed})"
    )
    table = Table("figure", "measured", "expected (exact Markov)", f"chain k={nodes} (exact)")
    table.add_row("target passes", f"{result.target_passes}", f"(target-only: {result.tokens})")
    table.add_row("draft calls", f"{result.draft_calls}", "", "")
    table.add_row(
        "accepted drafts / target pass",
        f"{result.accepted_per_pass:.3f}",
        f"{result.expected_accepted_per_pass:.3f}",
        f"{result.chain_tokens_per_pass - 1:.3f}",
    )
    table.add_row(
        "tokens / target pass",
        f"{result.tokens_per_pass:.3f}",
        f"{result.expected_tokens_per_pass:.3f}",
        f"{result.chain_tokens_per_pass:.3f}",
    )
    table.add_row(
        f"speedup (draft cost {result.draft_cost:g}x)",
        f"{result.speedup:.2f}x",
        f"{result.expected_speedup:.2f}x",
        f"{result.chain_expected_speedup:.2f}x",
    )
    console.print(table)
    verdict = (
        "beats" if result.expected_tokens_per_pass > result.chain_tokens_per_pass else "loses to"
    )
    console.print(
        f"alpha (stationary acceptance probability) = {result.alpha:.3f}; at {nodes} drafted "
        f"tokens per step the tree {verdict} the chain in tokens per pass (exact theory)"
    )
    console.print(
        f"accepted depth per step (0..{len(result.widths)}): {result.acceptance_histogram}"
    )


@app.command(name="sweep")
def sweep_command(
    k: Annotated[int, typer.Option("--k", min=1, help="Sweep k = 1..K.")] = 8,
    tokens: Tokens = 2000,
    draft_cost: DraftCost = 0.1,
    vocab: Vocab = 32,
    seed: Seed = 0,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG plot to this file.")] = None,
    as_json: AsJson = False,
) -> None:
    """Tokens per pass and speedup across draft agreements and k = 1..K, measured and expected."""
    setup = ToySetup(vocab_size=vocab, seed=seed)
    with _progress("sweeping", len(DEFAULT_AGREEMENTS) * k, not as_json) as advance:
        results = sweep(setup, k, tokens, draft_cost, seed, on_progress=advance)
    if plot is not None:
        from spec_decode.plots import plot_sweep

        try:
            plot_sweep(results, plot)
        except RuntimeError as error:
            raise typer.BadParameter(str(error), param_hint="--plot") from error
    if as_json:
        _print_json(
            {"tokens": tokens, "draft_cost": draft_cost, "rows": [r.to_dict() for r in results]}
        )
        return
    table = Table(
        "agreement",
        "alpha",
        "k",
        "tokens/pass",
        "expected",
        "speedup",
        "expected",
        title=f"{tokens} tokens per run, vocabulary {vocab}, draft cost {draft_cost:g}x",
    )
    for r in results:
        table.add_row(
            f"{r.agreement:g}",
            f"{r.alpha:.3f}",
            str(r.k),
            f"{r.tokens_per_pass:.3f}",
            f"{r.expected_tokens_per_pass:.3f}",
            f"{r.speedup:.2f}x",
            f"{r.expected_speedup:.2f}x",
        )
    console.print(table)
    if plot is not None:
        console.print(f"plot written to {plot}")


app.command("generate")(generate)
app.add_typer(models_app, name="models")


def _load(spec: str, option: str) -> object:
    """Import ``module:attribute`` for the auditor, or fail with a clear message."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise typer.BadParameter(f"expected module:attribute, got {spec!r}", param_hint=option)
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise typer.BadParameter(f"cannot load {spec!r}: {error}", param_hint=option) from error


def _audit_row(report: AuditReport) -> tuple[str, str]:
    """The verdict and its evidence in one line each."""
    if report.problem:
        return report.verdict, report.problem
    if report.method == "exhaustive":
        return report.verdict, (
            f"exhaustive TV {report.exhaustive_tv:.3g} (worst: {report.worst_case}; "
            f"{report.paths:,} paths)"
        )
    return report.verdict, (
        f"statistical: false-alarm rate {report.false_alarm_rate:g}, detects TV >= "
        f"{report.detectable_tv:.3f} with probability >= 0.99 per case "
        f"({'failed' if report.verdict == 'FAIL' else 'worst'}: {report.worst_case})"
    )


def _audit_json(report: AuditReport) -> dict:
    return {key: value for key, value in asdict(report).items() if key != "cases"} | {
        "pass": report.verdict == "PASS",
    }


@app.command(name="audit")
def audit_command(
    rule: Annotated[
        str | None,
        typer.Argument(help="Verification rule to audit, as module:attribute (default: ours)."),
    ] = None,
    drafter: Annotated[
        str | None,
        typer.Option(help="Drafter to audit, as module:attribute (object or plain callable)."),
    ] = None,
    zoo: Annotated[
        bool, typer.Option("--zoo", help="Audit every entry of spec_decode.zoo and the controls.")
    ] = False,
    statistical: Annotated[
        bool, typer.Option("--statistical", help="Judge by seeded chi-square tests instead.")
    ] = False,
    seed: Seed = 0,
    as_json: AsJson = False,
) -> None:
    """Certify or refute a verification rule and/or drafter; exits 1 on FAIL."""
    from spec_decode import zoo as zoo_module

    if zoo:
        entries = [
            (name, {"rule": entry}, expected)
            for entries, expected in (
                (zoo_module.EXACT_RULES, "PASS"),
                (zoo_module.BROKEN_RULES, "FAIL"),
            )
            for name, entry in entries.items()
        ] + [
            (name, {"drafter": entry}, expected)
            for entries, expected in (
                (zoo_module.EXACT_DRAFTERS, "PASS"),
                (zoo_module.BROKEN_DRAFTERS, "FAIL"),
            )
            for name, entry in entries.items()
        ]
    else:
        chosen = {"rule": _load(rule, "RULE") if rule else None}
        chosen["drafter"] = _load(drafter, "--drafter") if drafter else None
        entries = [(rule or drafter or "spec_decode.rules:exact_rule", chosen, None)]
    reports = {}
    with _progress("auditing", len(entries), not as_json) as advance:
        for name, chosen, _ in entries:
            reports[name] = audit(**chosen, statistical=statistical, seed=seed)
            advance()
    if as_json:
        payload = {name: _audit_json(report) for name, report in reports.items()}
        _print_json(payload if zoo else next(iter(payload.values())))
    else:
        table = Table("audited", "verdict", "evidence", *(["expected"] if zoo else []))
        for name, _, expected in entries:
            verdict, evidence = _audit_row(reports[name])
            colour = "green" if verdict == "PASS" else "red"
            table.add_row(name, f"[{colour}]{verdict}[/]", evidence, *([expected] if zoo else []))
        console.print(table)
    if any(reports[name].verdict != (expected or "PASS") for name, _, expected in entries):
        raise typer.Exit(1)
