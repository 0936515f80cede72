"""The `ouroboros` command. Each command parses its arguments, builds what it needs and calls
one function; errors become one line on stderr and an exit code (2 for usage or config).

    common.py       the app, the shared options, loading the project, errors to exit codes
    running.py      run, resume, init
    configuring.py  config show, config set, reload
    inspecting.py   status, runs, stats, logs, watch
    demo.py         demo

A command imports what it uses inside its body, so `--version`, `--help` and the read-only
commands start without the runner, httpx or rich.
"""

import sys

import typer
from typer.exceptions import TyperException

from ouroboros.cli.common import app

# Each module registers its commands on `app` as it is imported, so this order (not sorted) is
# the order `ouroboros --help` lists them in.
from ouroboros.cli import running, configuring, inspecting, demo

__all__ = ["app", "main", "running", "configuring", "inspecting", "demo"]


def main() -> None:
    """The `ouroboros` console script: `ouroboros run`, `ouroboros status`, ...

    A mistyped command line is one line too (typer's own is three: usage, hint, error)."""
    try:
        code = app(standalone_mode=False)
    except TyperException as error:  # a usage error: unknown command, bad or missing argument
        typer.echo(f"error: {error.format_message()} (see `{help_command(error)}`)", err=True)
        code = error.exit_code
    except typer.Abort:
        code = 1
    sys.exit(code if isinstance(code, int) else 0)


def help_command(error: TyperException) -> str:
    """The `--help` that answers a usage error: of the command it happened in (`ouroboros
    config set --help`), however the program was started (`python -m ouroboros` too)."""
    names = []
    context = getattr(error, "ctx", None)
    while context is not None and context.parent is not None:
        names.append(context.info_name or "")
        context = context.parent
    return " ".join(["ouroboros", *reversed(names), "--help"])
