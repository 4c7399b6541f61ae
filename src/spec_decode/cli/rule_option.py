"""``--rule``: the verification rule of a command (``run``, ``sweep``, and ``generate`` once its
rewrite takes it), checked into a :class:`~spec_decode.drafting.rule_choice.RuleChoice`."""

from __future__ import annotations

from typing import Annotated

import typer

from spec_decode.drafting.rule_choice import DEFAULT_RULE, RULE_NAMES, RuleChoice, rule_by_name

__all__ = ["DEFAULT_RULE", "RuleOption", "rule_option"]

#: ``--rule coupled|standard``.
RuleOption = Annotated[
    str,
    typer.Option(
        "--rule",
        help="coupled (target-only decoding's output for the seed, token for token) or "
        "standard (accept x with min(1, p/q)); both sample the target exactly.",
    ),
]


def rule_option(name: str) -> RuleChoice:
    """The rule ``--rule`` names, or a usage error (exit 2)."""
    try:
        return rule_by_name(name)
    except ValueError as error:
        raise typer.BadParameter(
            f"must be one of {', '.join(RULE_NAMES)}", param_hint="--rule"
        ) from error
