"""``spec-decode audit``: certify or refute a verification rule, tree rule or drafter given as
``module:attribute``, or every entry of the zoo.

The code under test always runs in a child process (:mod:`spec_decode.certify.isolation`), with
a time limit per case (``--case-timeout``) and overall (``--timeout``), so it can neither end
the audit nor outlast it. Exit status: 0 only when every verdict is as expected (PASS for the
code given); 1 on a FAIL or an ERROR (no verdict reached: a hang, or the code ended its
process); 2 when the input is unusable (a spec that cannot be imported, an unknown ``--case``),
like any bad parameter. ``--json`` prints a verdict object whenever an audit ran.
"""

from __future__ import annotations

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
    AuditSettings,
    CaseResult,
)
from spec_decode.certify.isolation import (
    AUDIT_TIMEOUT,
    CASE_TIMEOUT,
    AuditJob,
    IsolatedAuditor,
    UnusableCode,
    split_spec,
)
from spec_decode.cli.options import AsJson, Seed, console, print_json, status


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


def _user_code(rule: str | None, drafter: str | None, tree_rule: str | None) -> dict:
    """The specs to import in the child, their form checked here (exit 2 at once)."""
    chosen = {"rule": rule, "drafter": drafter, "tree_rule": tree_rule}
    for spec, option in zip(chosen.values(), ("RULE", "--drafter", "--tree-rule"), strict=True):
        if spec is not None:
            try:
                split_spec(spec, option)
            except UnusableCode as error:
                raise typer.BadParameter(str(error), param_hint=error.option) from error
    return chosen


#: The options of ``audit`` (named here so the command reads as what it does).
RuleArgument = Annotated[
    str | None,
    typer.Argument(
        help="Verification rule to audit, as module:attribute, zoo:NAME or hf:NAME (default: ours)."
    ),
]
DrafterOption = Annotated[
    str | None,
    typer.Option(help="Drafter to audit, as module:attribute (object or plain callable)."),
]
TreeRuleOption = Annotated[
    str | None,
    typer.Option(help="Tree rule (p, tree, rng) -> tokens to audit, as module:attribute."),
]
ZooFlag = Annotated[
    bool,
    typer.Option("--zoo", help="Audit every entry of spec_decode.certify.zoo and the controls."),
]
StatisticalFlag = Annotated[
    bool, typer.Option("--statistical", help="Judge by seeded chi-square tests instead.")
]
ToleranceOption = Annotated[
    float,
    typer.Option(min=0.0, help="Largest exact TV still counted as PASS (float32 code: 1e-6)."),
]
CaseOption = Annotated[
    list[str] | None,
    typer.Option(
        help="Audit only this case of the grid, by index or a piece of its name "
        "(repeatable), e.g. --case 'k=8' --case 'V=6'.",
    ),
]
CaseTimeoutOption = Annotated[
    float,
    typer.Option(
        min=0.001,
        help="Seconds one case may run before the code under test is stopped (ERROR).",
    ),
]
AuditTimeoutOption = Annotated[
    float,
    typer.Option(
        min=0.001,
        help="Seconds the whole audit (every zoo entry together) may run (ERROR past it).",
    ),
]


def audit_command(
    rule: RuleArgument = None,
    drafter: DrafterOption = None,
    tree_rule: TreeRuleOption = None,
    zoo: ZooFlag = False,
    statistical: StatisticalFlag = False,
    tolerance: ToleranceOption = EXACT_TV_TOLERANCE,
    case: CaseOption = None,
    case_timeout: CaseTimeoutOption = CASE_TIMEOUT,
    timeout: AuditTimeoutOption = AUDIT_TIMEOUT,
    seed: Seed = 0,
    as_json: AsJson = False,
) -> None:
    """Certify or refute a verification rule, tree rule and/or drafter; exits 1 on FAIL or
    ERROR, 0 only on PASS.

    The code runs in a child process. Each case is enumerated within a budget of CASE_PATHS
    paths and CASE_SECONDS seconds (past it the audit turns statistical and says so), and is
    stopped past --case-timeout seconds (the whole audit past --timeout): verdict ERROR, the
    case named. Each case's result is printed as it finishes.
    """
    if zoo:
        entries = _zoo_entries()
    else:
        chosen = _user_code(rule, drafter, tree_rule)
        name = rule or tree_rule or drafter or "spec_decode.core.rules:exact_rule"
        entries = [(name, chosen, None)]
    settings = AuditSettings(statistical=statistical, seed=seed, tolerance=tolerance)
    reports = {}
    with (
        IsolatedAuditor(case_timeout, timeout) as auditor,
        status("starting the audit process", not as_json) as show,
    ):
        for name, chosen, _ in entries:
            if not as_json:
                console.print(
                    f"auditing {name} (budget per case: {CASE_PATHS:,} paths, "
                    f"{CASE_SECONDS:g} s; stopped past {case_timeout:g} s)"
                )

            def show_start(case_name: str, method: str, entry: str = name) -> None:
                show(f"auditing {entry}: {case_name} ({method})")

            job = AuditJob(**chosen, picks=tuple(case or ()), settings=settings)
            try:
                reports[name] = auditor.audit(
                    job,
                    on_start=None if as_json else show_start,
                    on_case=None if as_json else _show_case,
                )
            except UnusableCode as error:
                raise typer.BadParameter(str(error), param_hint=error.option) from error
            if not as_json and reports[name].verdict == "ERROR":
                console.print(f"  [red]ERROR[/] {reports[name].problem}")
    if as_json:
        payload = {name: _audit_json(report) for name, report in reports.items()}
        print_json(payload if zoo else next(iter(payload.values())))
    else:
        _print_table(entries, reports, zoo)
    if any(reports[name].verdict != (expected or "PASS") for name, _, expected in entries):
        raise typer.Exit(1)


def _print_table(
    entries: list[tuple[str, dict, str | None]], reports: dict[str, AuditReport], zoo: bool
) -> None:
    """One row per audited entry: verdict, evidence and (for the zoo) the expected verdict."""
    table = Table()
    table.add_column("audited", min_width=max(len(n) for n, _, _ in entries), no_wrap=True)
    for column in ("verdict", "evidence", *(["expected"] if zoo else [])):
        table.add_column(column)
    for name, _, expected in entries:
        verdict, evidence = _audit_row(reports[name])
        colour = "green" if verdict == "PASS" else "red"
        table.add_row(name, f"[{colour}]{verdict}[/]", evidence, *([expected] if zoo else []))
    console.print(table)
