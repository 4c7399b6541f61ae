"""``generate`` and ``serve`` take the same engine options, declared once
(``cli/engine_options.py``), with the same help."""

from __future__ import annotations

import inspect

import typer
from typer.testing import CliRunner

from spec_decode.cli.app import app
from spec_decode.cli.engine_options import engine_config, given


def test_generate_and_serve_share_every_engine_option():
    commands = typer.main.get_command(app).commands
    options = {
        name: {param.name: param for param in commands[name].params}
        for name in ("generate", "serve")
    }
    serve_only = {"shared_history", "parallel"}  # server settings, not how to decode
    engine = set(inspect.signature(engine_config).parameters) - serve_only - {"context"}
    for name in sorted(engine):
        generate, serve = options["generate"].get(name), options["serve"].get(name)
        assert generate is not None and serve is not None, name
        assert generate.help == serve.help and generate.default == serve.default, name


def test_an_option_is_given_only_when_the_user_sets_it():
    """``given`` asks the command's own context (Typer may bring a copy of Click of its own,
    whose current context Click's ``get_current_context`` never sees): a draft left at its
    default is not given, so a target of another family sets the default draft aside."""
    command = typer.Typer()
    seen: list[bool] = []

    @command.command()
    def run(context: typer.Context, draft: str = "default") -> None:
        seen.append(given(context, "draft"))

    runner = CliRunner()
    assert runner.invoke(command, []).exit_code == 0
    assert runner.invoke(command, ["--draft", "other"]).exit_code == 0
    assert seen == [False, True]
