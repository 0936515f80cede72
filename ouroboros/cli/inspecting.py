"""Looking at runs without touching them: `ouroboros status`, `runs`, `stats`, `logs` and
`watch`."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ouroboros.cli.common import (ConfigOption, RunIdArgument, app, fail, guarded,
                                  load_for_reading)

if TYPE_CHECKING:
    from ouroboros.config import LoadedConfig
    from ouroboros.store.events import EventBase


@app.command(short_help="The current or last run: where it is, how full its context.")
def status(config: Optional[Path] = ConfigOption) -> None:
    """The current or last run: is it running, where it is, how full its context is."""
    from datetime import datetime, timezone

    from rich.console import Console

    from ouroboros.ui.status import run_status, status_view

    loaded = load_for_reading(config, "status")
    found = guarded(lambda: run_status(loaded.state_dir))
    if found is None:
        typer.echo(f"no runs yet in {loaded.state_dir}")
        return
    Console().print(status_view(found, now=datetime.now(timezone.utc)))


@app.command(short_help="The project's runs: state, sessions, turns, last event.")
def runs(config: Optional[Path] = ConfigOption) -> None:
    """The project's runs, newest last: started, state, sessions, turns, last event."""
    from datetime import datetime, timezone

    from rich.console import Console

    from ouroboros.ui.runs import project_runs, runs_view

    loaded = load_for_reading(config, "runs")
    found = guarded(lambda: project_runs(loaded.state_dir))
    if not found:
        typer.echo(f"no runs yet in {loaded.state_dir}")
        return
    Console().print(runs_view(found, now=datetime.now(timezone.utc)))


@app.command(short_help="Per-session numbers and a chart of context use.")
def stats(run_id: Optional[str] = RunIdArgument,
          config: Optional[Path] = ConfigOption,
          all_sessions: bool = typer.Option(False, "--all", help="List every session (a "
                                            "long run shows its first and last few).")) -> None:
    """Per-session numbers and a chart of context use over the run's turns."""
    from rich.console import Console

    from ouroboros.store.log import read_log
    from ouroboros.ui.stats import run_stats, stats_view

    loaded = load_for_reading(config, "stats")
    events = guarded(lambda: read_log(run_log(loaded, run_id)))
    context = loaded.config.context
    Console().print(stats_view(run_stats(events, context.soft_threshold_pct,
                                         context.hard_threshold_pct),
                               all_sessions=all_sessions))


FOLLOW_TAIL = 10
"""Events `logs --follow` shows before following, unless given -n (as `tail -f`)."""


@app.command()
def logs(
    run_id: Optional[str] = RunIdArgument,
    follow: bool = typer.Option(False, "--follow", "-f", help="Show the last events (10, or "
                                "-n), then each new one until the run ends (or Ctrl+C)."),
    tail: Optional[int] = typer.Option(None, "--tail", "-n", metavar="N", show_default=False,
                                       help="Only the last N events (read from the end of the "
                                       "log, however long the run)."),
    types: Optional[list[str]] = typer.Option(None, "--type", "-t", metavar="TYPE",
                                              help="Only events of this type (repeatable), "
                                              "e.g. --type tool_call."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """A run's events, one readable line each."""
    from ouroboros.errors import UsageError
    from ouroboros.store.log import read_log
    from ouroboros.ui.follow import follow_events, tail_events
    from ouroboros.ui.plain import format_any, listed, select_types

    if tail is not None and tail < 0:
        raise fail(UsageError(f"-n/--tail must be 0 or more events, got {tail}"))
    loaded = load_for_reading(config, "logs")
    wanted = guarded(lambda: select_types(types or []))
    path = guarded(lambda: run_log(loaded, run_id))
    count = FOLLOW_TAIL if follow and tail is None else tail
    if count is None:
        events: Iterable[EventBase] = guarded(lambda: read_log(path))
    else:
        last = guarded(lambda: tail_events(path, count, lambda kind: listed(kind, wanted)))
        later = follow_events(path, start=last.offset, ended=last.ended) if follow else ()
        events = itertools.chain(last.events, later)

    def show() -> None:
        for event in events:
            if listed(event.type, wanted):
                typer.echo(format_any(event))

    try:
        guarded(show)
    except KeyboardInterrupt:
        pass


@app.command()
def watch(run_id: Optional[str] = RunIdArgument,
          config: Optional[Path] = ConfigOption) -> None:
    """The live dashboard of a run going on in another terminal."""
    from ouroboros.ui.dashboard import DashboardState
    from ouroboros.ui.live import watch as watch_log

    loaded = load_for_reading(config, "watch")
    path = guarded(lambda: run_log(loaded, run_id))
    context = loaded.config.context
    state = DashboardState(soft=context.soft_threshold_pct, hard=context.hard_threshold_pct)
    try:
        watch_log(path, state)
    except KeyboardInterrupt:
        pass


def run_log(loaded: LoadedConfig, run_id: str | None) -> Path:
    """The event log of run `run_id` (default: the latest) in the project's state dir."""
    from ouroboros.store.log import EVENTS_FILE, find_run

    return find_run(loaded.state_dir, run_id) / EVENTS_FILE
