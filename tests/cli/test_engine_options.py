"""``generate`` and ``serve`` take the same engine options, declared once
(``cli/engine_options.py``), with the same help."""

from __future__ import annotations

import inspect

import typer

from spec_decode.cli.app import app
from spec_decode.cli.engine_options import engine_config


def test_generate_and_serve_share_every_engine_option():
    commands = typer.main.get_command(app).commands
    options = {
        name: {param.name: param for param in commands[name].params}
        for name in ("generate", "serve")
    }
    serve_only = {"shared_history", "parallel"}  # server settings, not how to decode
    engine = set(inspect.signature(engine_config).parameters) - serve_only
    for name in sorted(engine):
        generate, serve = options["generate"].get(name), options["serve"].get(name)
        assert generate is not None and serve is not None, name
        assert generate.help == serve.help and generate.default == serve.default, name
