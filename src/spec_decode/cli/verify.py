"""``spec-decode verify``: certify the sampler's exactness on toy models, by closed form and by
exhaustive enumeration of the generator itself."""

from __future__ import annotations

from typing import Annotated

import typer

from spec_decode.certify.closed_form import MAX_PAIRS, certify_closed_form
from spec_decode.certify.exhaustive import certify_exhaustive
from spec_decode.certify.grid import DEFAULT_CASES, FULL_CASES, ExhaustiveCase, describe
from spec_decode.certify.reference import TV_TOLERANCE
from spec_decode.cli.options import AsJson, Seed, console, print_json, progress


def _case_name(case: ExhaustiveCase) -> str:
    return (
        f"V={case.vocab}, k={case.k}, order {case.order}, {case.n_tokens} tokens, "
        f"{describe(case.sampling)}"
    )


def verify(
    pairs: Annotated[
        int,
        typer.Option(min=1, max=MAX_PAIRS, help=f"Random (p, q) pairs (at most {MAX_PAIRS:,})."),
    ] = 10_000,
    exhaustive: Annotated[
        bool,
        typer.Option(
            "--exhaustive",
            help="Enumerate the full grid instead of the quick one (a few minutes).",
        ),
    ] = False,
    seed: Seed = 0,
    as_json: AsJson = False,
) -> None:
    """Certify exactness: closed form over random pairs, and the generator itself enumerated."""
    with progress("closed form over random (p, q) pairs", pairs, not as_json) as advance:
        closed = certify_closed_form(pairs, seed, on_progress=advance)
    cases = FULL_CASES if exhaustive else DEFAULT_CASES
    with progress("enumerating the generator", len(cases), not as_json) as advance:
        enumerated = certify_exhaustive(cases, seed, on_progress=advance)
    passed = closed.passed and enumerated.passed
    if as_json:
        print_json(
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
        if enumerated.worst_case is not None:
            console.print(f"worst case:  {_case_name(enumerated.worst_case)}")
        console.print(f"tolerance {TV_TOLERANCE:g}")
        if passed:
            console.print("[green]PASS[/] — the emitted distribution equals the target's, exactly.")
        else:
            console.print("[red]FAIL[/] — the emitted distribution differs from the target's.")
    if not passed:
        raise typer.Exit(1)
