"""The ``spec-decode`` command line: one Typer app with every command registered."""

from __future__ import annotations

import typer

from spec_decode.cli.audit import audit_command
from spec_decode.cli.audit_engine import audit_engine_command
from spec_decode.cli.build_kernels import build_kernels_command
from spec_decode.cli.calibrate import calibrate_command
from spec_decode.cli.generate import generate_command
from spec_decode.cli.models import models_app
from spec_decode.cli.serve import serve_command
from spec_decode.cli.toy import run, sweep_command
from spec_decode.cli.verify import verify

app = typer.Typer(
    help="Exact speculative decoding, certified by running code.",
    no_args_is_help=True,
    add_completion=False,
)
app.command()(verify)
app.command()(run)
app.command(name="sweep")(sweep_command)
app.command(name="audit")(audit_command)
app.command(name="audit-engine")(audit_engine_command)
app.command(name="generate")(generate_command)
app.command(name="calibrate")(calibrate_command)
app.command(name="serve")(serve_command)
app.command(name="build-kernels")(build_kernels_command)
app.add_typer(models_app, name="models")

if __name__ == "__main__":
    app()
