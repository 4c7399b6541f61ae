"""Every command's ``--help`` reads at 80 columns: no line wider, and every description column
at least 40 characters wide (Rich's option table once squeezed ``serve``'s into 18)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from spec_decode.cli.app import app

WIDTH = 80
NARROWEST = 40


def command_paths(group: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command's words, groups included (typer's click, which may be its own copy)."""
    paths = [prefix]
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            paths += command_paths(command, (*prefix, name))
        else:
            paths.append((*prefix, name))
    return paths


PATHS = command_paths(typer.main.get_command(app))


def description_columns(text: str) -> list[tuple[int, str]]:
    """Each description line's width and text: the room from where it starts to the right edge
    (a Rich panel's border, or the terminal's), for option and argument rows and their
    continuation lines."""
    widths = []
    for line in text.splitlines():
        right = WIDTH
        if line.endswith("│"):  # inside a Rich panel: its borders as spaces, columns kept
            right, line = len(line) - 2, " " + line[1:-1]
        row = re.match(r"^ {1,6}-{0,2}\S+(?: \S+)*? {2,}(?=\S)", line)  # "  --port <int>   Port"
        continuation = re.match(r"^ {8,}(?=\S)", line)  # the indented rest of a description
        start = (continuation or row).end() if (continuation or row) else None
        if start is not None and start > 8:
            widths.append((right - start, line.strip()))
    return widths


@pytest.mark.parametrize("path", PATHS, ids=lambda path: " ".join(path) or "spec-decode")
def test_help_reads_at_80_columns(path):
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(WIDTH)})
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines()) <= WIDTH
    columns = description_columns(result.output)
    assert columns, "no description column found: has the help layout changed?"
    narrow = [line for width, line in columns if width < NARROWEST]
    assert narrow == [], f"descriptions narrower than {NARROWEST} characters"


def test_the_check_sees_a_squeezed_column():
    """The parser above finds the column of Rich's layout too, so a return to it is caught."""
    squeezed = (
        "│ --host                          <str>             Address to listen │\n"
        "│                                                   on.               │"
    )
    assert min(width for width, _ in description_columns(squeezed)) < NARROWEST
