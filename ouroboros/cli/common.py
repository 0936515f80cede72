"""The `ouroboros` app and what its commands share: the common options, finding and loading
the project, and turning an error into one line on stderr and an exit code."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import typer

from ouroboros import __version__
from ouroboros.errors import ConfigError, OuroborosError

# Each command imports what it uses, so `--version`, `--help` and the read-only commands start
# without the runner, httpx or rich.
if TYPE_CHECKING:
    from ouroboros.config import LoadedConfig

app = typer.Typer(
    name="ouroboros",
    help="Run an LLM agent indefinitely, managing its context window.",
    add_completion=False,
    no_args_is_help=False,  # the root callback prints the short usage instead
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

T = TypeVar("T")

# The config key each `run` flag sets, and the flag as errors name it.
RUN_FLAGS = {
    "agent.workspace": "--workspace",
    "model.name": "--model",
    "model.base_url": "--base-url",
    "agent.max_turns": "--max-turns",
    "metrics.port": "--metrics-port",
}

ConfigOption = typer.Option(
    None,
    "--config",
    "-c",
    metavar="PATH",
    help="Path to ouroboros.toml (default: the nearest one here or in a directory above).",
)
HeadlessOption = typer.Option(
    False,
    "--headless",
    help="Print plain lines, one per event, "
    "instead of the live view (also when stdout is not a terminal).",
)
JsonOption = typer.Option(
    False,
    "--json",
    help="Print each event as one JSON object per line "
    "on stdout (the log's records, checkpoints left out), and nothing "
    "else there: for a log shipper.",
)
MetricsPortOption = typer.Option(
    None,
    "--metrics-port",
    min=0,
    max=65535,
    metavar="PORT",
    show_default=False,
    help="Serve "
    "Prometheus metrics at http://127.0.0.1:N/metrics while the "
    "run goes on (metrics.port; 0 = off).",
)
RunIdArgument = typer.Argument(
    None, metavar="RUN_ID", show_default=False, help="The run (default: the latest)."
)


def fail(error: OuroborosError) -> typer.Exit:
    """Say `error` on stderr; the exit to raise: `raise fail(UsageError("..."))`."""
    typer.echo(f"error: {error.message}", err=True)
    return typer.Exit(error.exit_code)


def guarded(action: Callable[[], T]) -> T:
    """Run a command body, turning Ouroboros errors into one line and their exit code, and
    any other failure of the filesystem (a full disk, a read-only directory) into one line
    and exit 1; a reader that went away ends the command quietly."""
    try:
        return action()
    except OuroborosError as error:
        raise fail(error) from None
    except BrokenPipeError:  # the reader had enough (`ouroboros logs | head`): no error
        from ouroboros.ui.plain import discard_output

        discard_output(sys.stdout)
        raise typer.Exit(0) from None
    except OSError as error:
        what = f"cannot use {error.filename}: " if error.filename else ""
        raise fail(OuroborosError(f"{what}{error.strerror or error}")) from None


def version_callback(value: bool) -> None:
    """`--version`: print it and exit before any command runs."""
    if value:
        typer.echo(f"ouroboros {__version__}")
        raise typer.Exit()


SHORT_USAGE = (
    "usage: ouroboros COMMAND [ARGS]...  (run, resume, init, tell, status, watch, "
    "logs, ...)\nevery command: ouroboros --help; a new project: ouroboros init, "
    "then ouroboros run"
)


@app.callback(invoke_without_command=True)
def root(
    context: typer.Context,
    version: bool = typer.Option(
        False,
        "--version",
        callback=version_callback,
        is_eager=True,
        help="Show the version and exit.",
    ),
) -> None:
    """Ouroboros keeps an agent working for hours: it masks old tool output, warns the agent
    before the window is full, and restarts the session with its recent turns carried over."""
    if context.invoked_subcommand is None:  # bare `ouroboros`: the short usage, not the help
        typer.echo(SHORT_USAGE, err=True)
        raise typer.Exit(2)


def project_file(config: Path | None) -> Path:
    """The --config file, else the nearest ouroboros.toml upward from here (as git finds its
    repository). Raises ConfigError, saying where it looked, when there is none."""
    from ouroboros.config import CONFIG_FILENAME, find_project

    if config is not None:
        return config
    found = find_project(Path.cwd())
    if found is None:
        raise ConfigError(
            f"no {CONFIG_FILENAME} in {Path.cwd()} or any directory above it; "
            "run `ouroboros init` to create a project, or pass --config"
        )
    return found


def load_project(config: Path | None, overrides: dict[str, Any] | None = None) -> LoadedConfig:
    """The config of the project a command is about (see project_file), or exit 2."""
    from ouroboros.config import load_config

    def load() -> LoadedConfig:
        loaded = load_config(project_file(config), overrides or {}, flag_names=RUN_FLAGS)
        loaded.check_state_dir()
        return loaded

    return guarded(load)


def load_for_reading(
    config: Path | None, command: str, anyway: str = "reads the runs anyway"
) -> LoadedConfig:
    """The config of the project a read-only command looks at. Such a command needs only the
    state dir, so a config it cannot fully validate is one warning line (`ouroboros COMMAND`
    `anyway`), and the values that do hold are used; only a missing project (or an unusable
    state dir) is an error."""
    from ouroboros.config import load_config
    from ouroboros.config.lenient import load_leniently

    path = guarded(lambda: project_file(config))
    if not path.is_file():
        return load_project(path)  # not found, or a directory: nothing to read, exit 2
    try:
        loaded = load_config(path, {}, flag_names=RUN_FLAGS)
    except ConfigError as error:
        typer.echo(
            f"warning: {error.message}; `ouroboros {command}` {anyway} "
            "(a run or resume would refuse)",
            err=True,
        )
        loaded = load_leniently(path)
    guarded(loaded.check_state_dir)
    return loaded


def run_path(loaded: LoadedConfig, run_id: str | None) -> Path:
    """The directory of run `run_id` (default: the latest) in the project's state dir."""
    from ouroboros.store.log import find_run

    return find_run(loaded.state_dir, run_id)
