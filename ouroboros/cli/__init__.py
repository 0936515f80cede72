"""The `ouroboros` command. Each command parses its arguments, builds what it needs and calls
one function; errors become one line on stderr and an exit code (2 for usage or config).

    common.py       the app, the shared options, loading the project, errors to exit codes
    running.py      run, resume, init
    configuring.py  config show, config set, reload
    inspecting.py   status, runs, stats, logs, watch
    demo.py         demo

A command imports what it uses inside its body, so `--version`, `--help` and the read-only
commands start without the runner, httpx or rich (tests/test_cli_startup.py checks each); and
`main` imports only the module of the command it is given, so typer builds that command alone.

May import `demo`, `ui`, `metrics`, `loop`, `config`, `store` and the base modules.
"""

from __future__ import annotations

import sys
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typer import Typer
    from typer.exceptions import TyperException

# The modules that register commands on the app, in the order `ouroboros --help` lists them.
MODULES = ("running", "configuring", "inspecting", "demo")
# The module each command is in: `ouroboros status` imports (and typer builds) only its own.
COMMAND_MODULES = {
    "run": "running",
    "resume": "running",
    "init": "running",
    "config": "configuring",
    "reload": "configuring",
    "tell": "configuring",
    "status": "inspecting",
    "runs": "inspecting",
    "stats": "inspecting",
    "logs": "inspecting",
    "watch": "inspecting",
    "prune": "inspecting",
    "demo": "demo",
}

__all__ = ["app", "main", *MODULES]


def __getattr__(name: str) -> Any:
    """`from ouroboros.cli import app`: the app with every command on it."""
    if name == "app":
        return commands()
    if name in MODULES:
        return import_module(f"ouroboros.cli.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def commands(name: str | None = None) -> Typer:
    """The app with command `name` on it (with every command when `name` is not one)."""
    from ouroboros.cli.common import app

    wanted = COMMAND_MODULES.get(name or "")
    for module in MODULES if wanted is None else (wanted,):
        import_module(f"ouroboros.cli.{module}")
    if wanted is None:  # in --help's order, whichever module was imported first
        app.registered_commands.sort(
            key=lambda info: MODULES.index(info.callback.__module__.rsplit(".", 1)[-1])
        )
    return app


def main() -> None:
    """The `ouroboros` console script: `ouroboros run`, `ouroboros status`, ...

    A mistyped command line is one line too (typer's own is three: usage, hint, error)."""
    import typer
    from typer.exceptions import TyperException

    app = commands(sys.argv[1] if len(sys.argv) > 1 else None)
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
