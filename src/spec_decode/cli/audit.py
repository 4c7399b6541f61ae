"""``spec-decode audit``: certify or refute a verification rule or drafter given as
``module:attribute``, or every entry of the zoo."""

from __future__ import annotations

import importlib
from dataclasses import asdict
from typing import Annotated

import typer
from rich.table import Table

from spec_decode.certify import zoo as zoo_module
from spec_decode.certify.audit import AuditReport, audit
from spec_decode.cli.options import AsJson, Seed, console, print_json, progress


def _import_object(spec: str, option: str) -> object:
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
        bool,
        typer.Option(
            "--zoo", help="Audit every entry of spec_decode.certify.zoo and the controls."
        ),
    ] = False,
    statistical: Annotated[
        bool, typer.Option("--statistical", help="Judge by seeded chi-square tests instead.")
    ] = False,
    seed: Seed = 0,
    as_json: AsJson = False,
) -> None:
    """Certify or refute a verification rule and/or drafter; exits 1 on FAIL."""
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
        chosen = {"rule": _import_object(rule, "RULE") if rule else None}
        chosen["drafter"] = _import_object(drafter, "--drafter") if drafter else None
        entries = [(rule or drafter or "spec_decode.core.rules:exact_rule", chosen, None)]
    reports = {}
    with progress("auditing", len(entries), not as_json) as advance:
        for name, chosen, _ in entries:
            reports[name] = audit(**chosen, statistical=statistical, seed=seed)
            advance()
    if as_json:
        payload = {name: _audit_json(report) for name, report in reports.items()}
        print_json(payload if zoo else next(iter(payload.values())))
    else:
        table = Table("audited", "verdict", "evidence", *(["expected"] if zoo else []))
        for name, _, expected in entries:
            verdict, evidence = _audit_row(reports[name])
            colour = "green" if verdict == "PASS" else "red"
            table.add_row(name, f"[{colour}]{verdict}[/]", evidence, *([expected] if zoo else []))
        console.print(table)
    if any(reports[name].verdict != (expected or "PASS") for name, _, expected in entries):
        raise typer.Exit(1)
