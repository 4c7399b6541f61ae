"""The ``spec-decode`` command line: one Typer app with every command registered.

Help is click's plain layout (``rich_markup_mode=None``): at 80 columns every description keeps
a column of at least 46 characters, where Rich's option table squeezed it to 18. An error no
command catches still ends in one line, never a traceback (:class:`App`).
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from spec_decode.cli.audit import audit_command
from spec_decode.cli.audit_engine import audit_engine_command
from spec_decode.cli.build_kernels import build_kernels_command
from spec_decode.cli.calibrate import calibrate_command
from spec_decode.cli.generate import generate_command
from spec_decode.cli.models import models_app
from spec_decode.cli.preflight import EXTRA_OF_MODULE, install_hint
from spec_decode.cli.serve import serve_command
from spec_decode.cli.toy import run, sweep_command
from spec_decode.cli.verify import verify

#: Set to 1 to see the traceback of an error no command caught.
TRACEBACK_ENV = "SPEC_DECODE_TRACEBACK"
#: Errors of the machine rather than of spec-decode: a full disk, no permission.
_ENVIRONMENT = {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT}


class App(typer.Typer):
    """The Typer app, run as the ``spec-decode`` script: an exception no command turned into a
    message is printed as one (exit 2 for the machine's and the installation's errors, 1 for
    anything else, which is a bug) unless ``SPEC_DECODE_TRACEBACK=1``."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except Exception as error:
            if os.environ.get(TRACEBACK_ENV):
                raise
            code, text = described(error)
            Console(stderr=True).print(f"[red]error:[/] {escape(text)}")
            sys.exit(code)


def described(error: Exception) -> tuple[int, str]:
    """The exit status and the sentence for an exception no command caught."""
    from spec_decode.backends.llamacpp.library import LibrariesMissing

    if isinstance(error, LibrariesMissing):
        return 2, str(error)
    if isinstance(error, ModuleNotFoundError):
        extra = EXTRA_OF_MODULE.get((error.name or "").split(".")[0])
        if extra is None:
            return 2, str(error)
        return 2, f"{error.name} is not installed: the [{extra}] extra, {install_hint(extra)}"
    if isinstance(error, OSError) and error.errno in _ENVIRONMENT:
        return 2, str(error)
    return 1, (
        f"{type(error).__name__}: {error} (a bug in spec-decode: {TRACEBACK_ENV}=1 shows where; "
        "please report it)"
    )


app = App(
    help="Exact speculative decoding, certified by running code.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
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
