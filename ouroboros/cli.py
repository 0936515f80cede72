"""The `ouroboros` command. Each command parses its arguments, builds what it needs and calls
one function; errors become one line on stderr and an exit code (2 for usage or config)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import typer

from ouroboros import __version__
from ouroboros.config import load_config
from ouroboros.errors import OuroborosError
from ouroboros.runner import RunHooks, run_agent
from ouroboros.ui.plain import plain_printer

app = typer.Typer(
    name="ouroboros",
    help="Run an LLM agent indefinitely, managing its context window.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

T = TypeVar("T")

ConfigOption = typer.Option(None, "--config", "-c", help="Path to ouroboros.toml "
                            "(default: ./ouroboros.toml).", dir_okay=False)
HeadlessOption = typer.Option(False, "--headless", help="Print plain lines, one per event, "
                              "instead of the live view (also when stdout is not a terminal).")


def fail(error: OuroborosError) -> typer.Exit:
    typer.echo(f"error: {error.message}", err=True)
    return typer.Exit(error.exit_code)


def guarded(action: Callable[[], T]) -> T:
    """Run a command body, turning Ouroboros errors into one line and their exit code."""
    try:
        return action()
    except OuroborosError as error:
        raise fail(error) from None


def version_callback(value: bool) -> None:
    if value:
        typer.echo(f"ouroboros {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(False, "--version", callback=version_callback,
                                 is_eager=True, help="Show the version and exit."),
) -> None:
    """Ouroboros keeps an agent working for hours: it masks old tool output, warns the agent
    before the window is full, and restarts the session with its recent turns carried over."""


def make_hooks(headless: bool) -> RunHooks:
    interactive = not headless and sys.stdout.isatty()
    if interactive:
        from ouroboros.ui.live import live_hooks

        return live_hooks()
    return RunHooks(on_event=plain_printer())


def flags(**values: Any) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


@app.command()
def run(
    config: Optional[Path] = ConfigOption,
    workspace: Optional[Path] = typer.Option(None, help="The agent's workspace directory."),
    model: Optional[str] = typer.Option(None, help="Model name, e.g. llama3.2."),
    base_url: Optional[str] = typer.Option(None, help="Server root, e.g. http://127.0.0.1:11434."),
    max_turns: Optional[int] = typer.Option(None, min=0, help="Stop after N model turns in "
                                            "total (0 = no limit)."),
    headless: bool = HeadlessOption,
) -> None:
    """Start a new run of the agent described by ouroboros.toml and SYSTEM_PROMPT.md."""
    overrides = flags(**{"agent.workspace": workspace, "model.name": model,
                         "model.base_url": base_url, "agent.max_turns": max_turns})
    loaded = guarded(lambda: load_config(config, overrides))
    code = guarded(lambda: asyncio.run(run_agent(loaded, make_hooks(headless))))
    raise typer.Exit(code)


@app.command()
def resume(
    config: Optional[Path] = ConfigOption,
    run_id: Optional[str] = typer.Option(None, "--run", help="The run to resume "
                                         "(default: the latest)."),
    headless: bool = HeadlessOption,
) -> None:
    """Continue a run that was killed or crashed, from its log."""
    loaded = guarded(lambda: load_config(config, {}))
    code = guarded(lambda: asyncio.run(
        run_agent(loaded, make_hooks(headless), resume=True, run_id=run_id)))
    raise typer.Exit(code)


def main() -> None:
    app()
