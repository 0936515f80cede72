"""The configuration: `ouroboros config show`, `get`, `set` and `unset`, and `reload` to make
a running run read it now; `tell` to give a running (or the next) run a message for the
agent."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ouroboros.cli.common import (
    ConfigOption,
    app,
    fail,
    guarded,
    load_for_reading,
    load_project,
    project_file,
)
from ouroboros.errors import ConfigError

if TYPE_CHECKING:
    from ouroboros.config import LoadedConfig


config_app = typer.Typer(help="Show or change the configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")


@config_app.command(
    "show", short_help="Every key (or those named), its value and where it came from."
)
def config_show(
    keys: Optional[list[str]] = typer.Argument(
        None, metavar="KEY", show_default=False, help="Only these dotted keys, e.g. model.name."
    ),
    config: Optional[Path] = ConfigOption,
    full: bool = typer.Option(
        False,
        "--full",
        help="Every item of long lists (safety.blocked_patterns), not just the first ones.",
    ),
) -> None:
    """Every key (or only the KEYs named), its effective value, where it came from, and what
    differs from the default."""
    from rich.console import Console

    from ouroboros.config import load_config
    from ouroboros.config.editing import check_key
    from ouroboros.ui.config_view import config_table

    for key in keys or []:
        guarded(lambda: check_key(key))
    try:
        loaded = load_config(config, {})
    except ConfigError as error:
        loaded = despite(error, config)
    Console().print(config_table(loaded, full=full, keys=keys or None))


def despite(error: ConfigError, config: Path | None) -> LoadedConfig:
    """`config show` of a config that does not validate: one warning line naming the problem,
    and the config as far as it holds (what does not, at its default); a project file that is
    not there is the error itself, exit 2."""
    from ouroboros.config import find_project
    from ouroboros.config.lenient import load_leniently

    path = config if config is not None else find_project(Path.cwd())
    if path is None or not path.is_file():
        raise fail(error)
    typer.echo(
        f"warning: {error.message}; shown as far as it holds, the rest at its default "
        "(a run or resume would refuse)",
        err=True,
    )
    return load_leniently(path)


@config_app.command("get", short_help="One key's effective value, alone on a line.")
def config_get(
    key: str = typer.Argument(..., metavar="KEY", help="A dotted key, e.g. model.name."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """One key's effective value, for scripts: text as it is, anything else as TOML writes
    it (`ouroboros config show KEY` says where it came from)."""
    from ouroboros.config import load_config
    from ouroboros.config.editing import check_key
    from ouroboros.config.values import toml_value

    guarded(lambda: check_key(key))
    loaded = guarded(lambda: load_config(config, {}))
    table, name = key.split(".")
    value = getattr(getattr(loaded.config, table), name)
    typer.echo(value if isinstance(value, str) else toml_value(value))


# ignore_unknown_options: a VALUE such as -1 or -x is the value, not an unknown option
@config_app.command(
    "set",
    short_help="Change one key in ouroboros.toml, validated.",
    context_settings={"ignore_unknown_options": True},
)
def config_set(
    key: str = typer.Argument(
        ..., metavar="KEY", help="A dotted key, e.g. context.soft_threshold_pct."
    ),
    value: str = typer.Argument(
        ..., metavar="VALUE", help='A TOML value (0.6, true, "text") or plain text.'
    ),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Set one key in ouroboros.toml, validated first; every comment and other line of the
    file is kept (a commented-out default is uncommented where it is)."""
    from ouroboros.config import load_config, set_config_value
    from ouroboros.config.values import toml_value
    from ouroboros.loop.reload import effect_note, live_holder
    from ouroboros.ui.config_view import override_note, shown_value
    from ouroboros.ui.status import run_status

    path = guarded(lambda: project_file(config))
    written = guarded(lambda: set_config_value(path, key, value))
    shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
    typer.echo(f"{key} = {toml_value(shown_value(key, written))} (in {shown})")
    loaded = guarded(lambda: load_config(path, {}))
    note = override_note(loaded, key)
    if note is not None:
        typer.echo(note)
    if live_holder(loaded.state_dir) is not None:
        found = guarded(lambda: run_status(loaded.state_dir))
        where = (found.state.session, found.state.turn) if found is not None else (None, None)
        typer.echo(effect_note(key, *where))


@config_app.command(
    "unset", short_help="Take one key out of ouroboros.toml: its default applies again."
)
def config_unset(
    key: str = typer.Argument(..., metavar="KEY", help="A dotted key, e.g. model.temperature."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Take one key out of ouroboros.toml, validated first; every comment and other line of
    the file is kept. The value below it (the user file's, or the default) applies again."""
    from ouroboros.config import load_config, unset_config_value
    from ouroboros.config.values import toml_value
    from ouroboros.ui.config_view import shown_value

    path = guarded(lambda: project_file(config))
    removed = guarded(lambda: unset_config_value(path, key))
    shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
    loaded = guarded(lambda: load_config(path, {}))
    table, name = key.split(".")
    value = getattr(getattr(loaded.config, table), name)
    now = (
        f"a list of {len(value)}"
        if isinstance(value, list)
        else toml_value(shown_value(key, value))
    )
    now = f"{now} {loaded.origin(key)}"
    if not removed:
        typer.echo(f"{key} is not set in {shown}; it is {now}")
        return
    typer.echo(f"{key} unset in {shown}; it is now {now}")


@app.command(short_help="Make the running run read its config now (a new session).")
def reload(config: Optional[Path] = ConfigOption) -> None:
    """Ask the running run to end its session early (after a wind-down), so the next session
    starts now with the config as it is on disk (the same as SIGHUP to the harness)."""
    import socket

    from ouroboros.loop.reload import request_reload

    loaded = load_project(config)
    holder = guarded(lambda: request_reload(loaded.state_dir, socket.gethostname()))
    typer.echo(
        f"asked run {holder.get('run_id')} (pid {holder['pid']}) to end its session: "
        "the agent saves its state, then the next session reads the config again"
    )


@app.command(short_help="Give the agent a message at its next turn (or at the next resume).")
def tell(
    text: Optional[str] = typer.Argument(
        None, metavar="[TEXT]", show_default=False, help="The message for the agent."
    ),
    file: Optional[Path] = typer.Option(
        None, "--file", "-f", metavar="PATH", help="Read the message from this file (- for stdin)."
    ),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Leave a message for the agent: a running run gives it to the agent as a user message
    at its next turn boundary (and logs it); with no run going on, the next `resume` (or
    `run`) does."""
    from ouroboros.loop.inbox import checked, post
    from ouroboros.loop.reload import live_holder

    message = guarded(lambda: checked(message_text(text, file)))
    # the inbox needs only the state dir: a config with a typo still finds it
    loaded = load_for_reading(config, "tell", anyway="delivers the message anyway")
    guarded(lambda: post(loaded.state_dir, message))
    holder = live_holder(loaded.state_dir)
    if holder is not None:
        typer.echo(
            f"sent to run {holder.get('run_id')} (pid {holder['pid']}): the agent "
            "gets it at its next turn"
        )
    else:
        typer.echo(
            "no run is going on: the message waits for the next `ouroboros resume` "
            "(or `ouroboros run`)"
        )


def message_text(text: str | None, file: Path | None) -> str:
    """TEXT or the --file's text (at most one byte more than a message may hold is read, so
    `--file /dev/zero` is one line too); UsageError for both, neither, or a file that cannot
    be read."""
    import sys

    from ouroboros.errors import UsageError
    from ouroboros.loop.inbox import MAX_MESSAGE_BYTES

    if (text is None) == (file is None):
        raise UsageError("give the message as TEXT or with --file, one of the two")
    if file is None:
        return text or ""
    try:
        if str(file) == "-":
            data = sys.stdin.buffer.read(MAX_MESSAGE_BYTES + 1)
        else:
            with file.open("rb") as stream:
                data = stream.read(MAX_MESSAGE_BYTES + 1)
        if len(data) > MAX_MESSAGE_BYTES:
            raise UsageError(
                f"the message in {file} is over {MAX_MESSAGE_BYTES:,} bytes, the "
                "most that may be sent (put the rest in a workspace file and tell "
                "the agent to read it)"
            )
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(
            f"cannot read the message from {file}: {getattr(error, 'strerror', None) or error}"
        ) from None
