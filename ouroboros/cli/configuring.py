"""The configuration: `ouroboros config show`, `config set`, and `reload` to make a running
run read it now."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ouroboros.cli.common import ConfigOption, app, guarded, load_project, project_file


config_app = typer.Typer(help="Show or change the configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")


@config_app.command("show", short_help="Every key, its value and where it came from.")
def config_show(
    config: Optional[Path] = ConfigOption,
    full: bool = typer.Option(False, "--full", help="Every item of long lists "
                              "(safety.blocked_patterns), not just the first ones."),
) -> None:
    """Every key, its effective value, where it came from, and what differs from the
    default."""
    from rich.console import Console

    from ouroboros.config import load_config
    from ouroboros.ui.config_view import config_table

    loaded = guarded(lambda: load_config(config, {}))
    Console().print(config_table(loaded, full=full))


# ignore_unknown_options: a VALUE such as -1 or -x is the value, not an unknown option
@config_app.command("set", short_help="Change one key in ouroboros.toml, validated.",
                    context_settings={"ignore_unknown_options": True})
def config_set(
    key: str = typer.Argument(..., help="A dotted key, e.g. context.soft_threshold_pct."),
    value: str = typer.Argument(..., help="A TOML value (0.6, true, \"text\") or plain text."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Set one key in ouroboros.toml, validated first; every comment and other line of the
    file is kept (a commented-out default is uncommented where it is)."""
    from ouroboros.config import load_config, set_config_value
    from ouroboros.loop.reload import effect_note, live_holder
    from ouroboros.config.values import toml_value
    from ouroboros.ui.config_view import override_note
    from ouroboros.ui.status import run_status

    path = guarded(lambda: project_file(config))
    written = guarded(lambda: set_config_value(path, key, value))
    shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
    typer.echo(f"{key} = {toml_value(written)} (in {shown})")
    loaded = guarded(lambda: load_config(path, {}))
    note = override_note(loaded, key)
    if note is not None:
        typer.echo(note)
    if live_holder(loaded.state_dir) is not None:
        found = guarded(lambda: run_status(loaded.state_dir))
        where = (found.state.session, found.state.turn) if found is not None else (None, None)
        typer.echo(effect_note(key, *where))


@app.command(short_help="Make the running run read its config now (a new session).")
def reload(config: Optional[Path] = ConfigOption) -> None:
    """Ask the running run to end its session early (after a wind-down), so the next session
    starts now with the config as it is on disk (the same as SIGHUP to the harness)."""
    import socket

    from ouroboros.loop.reload import request_reload

    loaded = load_project(config)
    holder = guarded(lambda: request_reload(loaded.state_dir, socket.gethostname()))
    typer.echo(f"asked run {holder.get('run_id')} (pid {holder['pid']}) to end its session: "
               "the agent saves its state, then the next session reads the config again")
