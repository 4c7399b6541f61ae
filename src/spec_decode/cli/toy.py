"""The toy commands: ``run`` (one toy generation beside exact theory) and ``sweep`` (every
agreement x k)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from spec_decode.cli.options import (
    AsJson,
    Confidence,
    DraftCost,
    K,
    MinP,
    Seed,
    Temperature,
    Tokens,
    TopK,
    TopP,
    TreeWidths,
    Vocab,
    check_sizes,
    check_sweep,
    console,
    print_json,
    progress,
    sampling_params,
)
from spec_decode.cli.preflight import check_output, require
from spec_decode.cli.rule_option import RuleOption, rule_option
from spec_decode.drafting.policies import optimal_k
from spec_decode.toy.experiments import (
    DEFAULT_AGREEMENTS,
    RunResult,
    ToySetup,
    TreeRunResult,
    run_experiment,
    run_tree_experiment,
    sweep,
)

#: ``toy run --policy``: how k is chosen before each step.
ToyPolicy = Annotated[
    str,
    typer.Option(
        help="How k is chosen each step: fixed, schedule (+2 after a full accept, -1 after a "
        "rejection) or cost (best expected speedup); adaptive ones start at --k.",
    ),
]


def run(
    agreement: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Draft agreement a: q = a p + (1 - a) r.")
    ] = 0.8,
    k: K = 4,
    policy: ToyPolicy = "fixed",
    k_max: Annotated[int, typer.Option(min=1, help="Largest k an adaptive policy may pick.")] = 16,
    confidence: Confidence = 0.0,
    tree: TreeWidths = None,
    without_replacement: Annotated[
        bool,
        typer.Option("--without-replacement", help="Draw a tree's siblings without replacement."),
    ] = False,
    tokens: Tokens = 5000,
    draft_cost: DraftCost = 0.1,
    vocab: Vocab = 32,
    order: Annotated[int, typer.Option(min=1, help="Markov order of the toy models.")] = 1,
    temperature: Temperature = 1.0,
    top_k: TopK = None,
    top_p: TopP = 1.0,
    min_p: MinP = 0.0,
    seed: Seed = 0,
    rule: RuleOption = "standard",
    as_json: AsJson = False,
) -> None:
    """Generate from a toy Markov pair; measured figures next to the exact expectation."""
    shape = check_sizes(k, vocab, order, tree, k_max)
    if rule_option(rule).coupled and shape is not None:
        raise typer.BadParameter(
            "no exact tree theory for the coupled rule yet", param_hint="--rule"
        )
    sampling = sampling_params(temperature, top_k, top_p, min_p)
    setup = ToySetup(vocab_size=vocab, order=order, seed=seed)
    with progress("generating", tokens, not as_json) as advance:
        try:
            if shape is not None:
                tree_result = run_tree_experiment(
                    setup,
                    agreement,
                    shape,
                    tokens,
                    draft_cost,
                    seed,
                    sampling,
                    replacement=not without_replacement,
                    on_tokens=lambda emitted: advance(len(emitted)),
                )
            else:
                result = run_experiment(
                    setup,
                    agreement,
                    k,
                    tokens,
                    draft_cost,
                    seed,
                    sampling,
                    policy=policy,
                    k_max=k_max,
                    min_confidence=confidence,
                    on_tokens=lambda emitted: advance(len(emitted)),
                    rule=rule,
                )
        except ValueError as error:
            raise typer.BadParameter(str(error)) from error
    if shape is not None:
        _print_tree_run(tree_result, vocab, order, seed, as_json)
        return
    if as_json:
        print_json(result.to_dict())
        return
    _print_chain_run(
        result, agreement=agreement, k=k, vocab=vocab, order=order, seed=seed, rule=rule,
        policy=policy, k_max=k_max, confidence=confidence, draft_cost=draft_cost,
    )  # fmt: skip


def _print_chain_run(
    result: RunResult,
    *,
    agreement: float,
    k: int,
    vocab: int,
    order: int,
    seed: int,
    rule: str,
    policy: str,
    k_max: int,
    confidence: float,
    draft_cost: float,
) -> None:
    """A chain run's measured figures beside the exact expectation, as a table."""
    console.print(
        f"generated {result.tokens} tokens  (draft agreement {agreement:g}, k={k}, "
        f"vocabulary {vocab}, order {order}, seed {seed}, {rule} rule)"
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
        print_json(result.to_dict())
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


def sweep_command(
    k: Annotated[int, typer.Option("--k", min=1, help="Sweep k = 1..K.")] = 8,
    tokens: Tokens = 2000,
    draft_cost: DraftCost = 0.1,
    vocab: Vocab = 32,
    seed: Seed = 0,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG plot to this file.")] = None,
    rule: RuleOption = "standard",
    as_json: AsJson = False,
) -> None:
    """Tokens per pass and speedup across draft agreements and k = 1..K, measured and expected
    (with ``--rule coupled``, the plot also draws the standard rule's theory)."""
    check_sweep(k, vocab, tokens, len(DEFAULT_AGREEMENTS))
    if plot is not None:
        from spec_decode.toy.plots import plot_path, plot_sweep

        try:
            check_output(plot_path(plot))
            require("plot", ("matplotlib",), "--plot")
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint="--plot") from error
    rule_option(rule)
    setup = ToySetup(vocab_size=vocab, seed=seed)
    with progress("sweeping", len(DEFAULT_AGREEMENTS) * k, not as_json) as advance:
        results = sweep(setup, k, tokens, draft_cost, seed, on_progress=advance, rule=rule)
    if plot is not None:
        beside = []  # the coupled curve is drawn beside the standard rule's theory
        if rule_option(rule).coupled:
            beside = sweep(setup, k, tokens, draft_cost, seed, rule="standard")
        try:
            plot = plot_sweep(results, plot, beside)
        except (RuntimeError, OSError) as error:
            raise typer.BadParameter(str(error), param_hint="--plot") from error
    if as_json:
        print_json(
            {
                "tokens": tokens,
                "draft_cost": draft_cost,
                "rule": rule,
                "rows": [r.to_dict() for r in results],
            }
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
        title=f"{tokens} tokens per run, vocabulary {vocab}, draft cost {draft_cost:g}x, "
        f"{rule} rule",
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
