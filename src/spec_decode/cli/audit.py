"""``spec-decode audit``: certify or refute a verification rule, tree rule or drafter given as
``module:attribute``, or every entry of the zoo.

Exit status: 0 when every verdict is as expected, 1 on a FAIL, 2 when the input is unusable (a
spec that cannot be imported, an unknown ``--case``), like any bad parameter.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import asdict
from typing import Annotated

import typer
from rich.table import Table

from spec_decode.certify import zoo as zoo_module
from spec_decode.certify.audit import (
    CASE_PATHS,
    CASE_SECONDS,
    EXACT_TV_TOLERANCE,
    AuditReport,
    CaseResult,
    audit,
)
from spec_decode.certify.grid import AuditCase, audit_cases
from spec_decode.cli.options import AsJson, Seed, console, print_json


def _import_object(spec: str, option: str) -> object:
    """Import ``module:attribute`` (the current directory first on the path), or fail with a
    clear message and exit status 2, whatever importing the module raised."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise typer.BadParameter(f"expected module:attribute, got {spec!r}", param_hint=option)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except SyntaxError as error:
        where = f"{error.filename}:{error.lineno}"
        raise typer.BadParameter(
            f"cannot import {module_name!r}: syntax error at {where}: {error.msg}",
            param_hint=option,
        ) from error
    except Exception as error:  # any failure while importing user code
        raise typer.BadParameter(
            f"cannot import {module_name!r}: {type(error).__name__}: {error}", param_hint=option
        ) from error
    if not hasattr(module, attribute):
        raise typer.BadParameter(
            f"{module_name!r} has no attribute {attribute!r}", param_hint=option
        )
    return getattr(module, attribute)


def _pick_cases(picks: list[str], seed: int, vocab: int | None) -> list[AuditCase] | None:
    """The grid cases named by index or by a piece of their name; None for the whole grid."""
    if not picks:
        return None
    grid = audit_cases(seed, vocab)
    chosen: list[AuditCase] = []
    for pick in picks:
        matches = (
            [grid[int(pick)]]
            if pick.isdigit() and int(pick) < len(grid)
            else [c for c in grid if pick.lower() in c.name.lower()]
        )
        if not matches:
            names = "; ".join(f"{i}: {c.name}" for i, c in enumerate(grid))
            raise typer.BadParameter(
                f"no case matches {pick!r}; the cases are {names}", param_hint="--case"
            )
        chosen += [c for c in matches if c not in chosen]
    return chosen


def _audit_row(report: AuditReport) -> tuple[str, str]:
    """The verdict and its evidence."""
    if report.problem:
        return report.verdict, report.problem
    if report.method == "exhaustive":
        rounding = (
            f"; exact rule on float32-rounded inputs: TV {report.rounding_tv:.2g}"
            if report.rounding_tv is not None
            else ""
        )
        return report.verdict, (
            f"exhaustive TV {report.exhaustive_tv:.3g} (limit {report.tolerance:g}; worst: "
            f"{report.worst_case}; {report.paths:,} paths{rounding})"
        )
    why = "" if report.fallback == "requested" else f"; not enumerable: {report.fallback}"
    return report.verdict, (
        f"statistical: joint of the first k + 3 tokens, family-wise false-alarm rate "
        f"{report.false_alarm_rate:g}, smallest p-value {report.min_p_value:.3g} "
        f"({report.worst_case}); detects TV >= {report.detectable_tv:.3f} with probability "
        f">= 0.99 in every case{why}"
    )


def _audit_json(report: AuditReport) -> dict:
    cases = [
        {"case": c.case, "tv": c.tv, "paths": c.paths, "p_value": c.p_value, "pass": c.passed}
        for c in report.cases
    ]
    return {key: value for key, value in asdict(report).items() if key != "cases"} | {
        "pass": report.verdict == "PASS",
        "cases": cases,
    }


def _zoo_entries() -> list[tuple[str, dict, str]]:
    """Every zoo entry with what to pass the auditor and the expected verdict."""
    groups = (
        ("rule", zoo_module.EXACT_RULES, "PASS"),
        ("rule", zoo_module.BROKEN_RULES, "FAIL"),
        ("rule", zoo_module.ROUNDING_RULES, "FAIL"),
        ("drafter", zoo_module.EXACT_DRAFTERS, "PASS"),
        ("drafter", zoo_module.BROKEN_DRAFTERS, "FAIL"),
    )
    return [
        (name, {kind: entry}, expected)
        for kind, entries, expected in groups
        for name, entry in entries.items()
    ]


def _show_case(result: CaseResult) -> None:
    if result.tv is not None:
        evidence = f"TV {result.tv:.3g}, {result.paths:,} paths"
    else:
        evidence = f"p-value {result.p_value:.3g}, {result.statistical.runs:,} runs"
    console.print(f"  {'ok  ' if result.passed else 'FAIL'} {result.case}: {evidence}")


def audit_command(
    rule: Annotated[
        str | None,
        typer.Argument(help="Verification rule to audit, as module:attribute (default: ours)."),
    ] = None,
    drafter: Annotated[
        str | None,
        typer.Option(help="Drafter to audit, as module:attribute (object or plain callable)."),
    ] = None,
    tree_rule: Annotated[
        str | None,
        typer.Option(help="Tree rule (p, tree, rng) -> tokens to audit, as module:attribute."),
    ] = None,
    zoo: Annotated[
        bool,
        typer.Option(
            "--zoo", help="Audit every entry of spec_decode.certify.zoo and the controls."
        ),
    ] = False,
    statistical: Annotated[
        bool, typer.Option("--statistical", help="Judge by seeded chi-square tests instead.")
    ] = False,
    tolerance: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Largest exact TV still counted as PASS (float32 code: 1e-6).",
        ),
    ] = EXACT_TV_TOLERANCE,
    case: Annotated[
        list[str] | None,
        typer.Option(
            help="Audit only this case of the grid, by index or a piece of its name "
            "(repeatable), e.g. --case 'k=8' --case 'V=6'.",
        ),
    ] = None,
    seed: Seed = 0,
    as_json: AsJson = False,
) -> None:
    """Certify or refute a verification rule, tree rule and/or drafter; exits 1 on FAIL.

    Each case is enumerated within a budget of CASE_PATHS paths and CASE_SECONDS seconds (past it
    the audit turns statistical and says so); each case's result is printed as it finishes.
    """
    if zoo:
        entries = _zoo_entries()
    else:
        chosen = {"rule": _import_object(rule, "RULE") if rule else None}
        chosen["drafter"] = _import_object(drafter, "--drafter") if drafter else None
        chosen["tree_rule"] = _import_object(tree_rule, "--tree-rule") if tree_rule else None
        name = rule or tree_rule or drafter or "spec_decode.core.rules:exact_rule"
        entries = [(name, chosen, None)]
    reports = {}
    for name, chosen, _ in entries:
        cases = _pick_cases(case or [], seed, getattr(chosen.get("drafter"), "vocab_size", None))
        if not as_json:
            console.print(
                f"auditing {name} (budget per case: {CASE_PATHS:,} paths, {CASE_SECONDS:g} s)"
            )
        reports[name] = audit(
            **chosen,
            statistical=statistical,
            seed=seed,
            tolerance=tolerance,
            cases=cases,
            on_case=None if as_json else _show_case,
        )
    if as_json:
        payload = {name: _audit_json(report) for name, report in reports.items()}
        print_json(payload if zoo else next(iter(payload.values())))
    else:
        table = Table()
        table.add_column("audited", min_width=max(len(n) for n, _, _ in entries), no_wrap=True)
        for column in ("verdict", "evidence", *(["expected"] if zoo else [])):
            table.add_column(column)
        for name, _, expected in entries:
            verdict, evidence = _audit_row(reports[name])
            colour = "green" if verdict == "PASS" else "red"
            table.add_row(name, f"[{colour}]{verdict}[/]", evidence, *([expected] if zoo else []))
        console.print(table)
    if any(reports[name].verdict != (expected or "PASS") for name, _, expected in entries):
        raise typer.Exit(1)
