"""Looking at runs without touching them: `ouroboros status`, `runs`, `stats`, `logs` and
`watch`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ouroboros.cli.common import ConfigOption, JsonOption, RunIdArgument, app, guarded, \
    load_project

if TYPE_CHECKING:
    from ouroboros.config import LoadedConfig
    from ouroboros.ui.status import RunStatus


@app.command(short_help="The current or last run: where it is, how full its context.")
def status(config: Optional[Path] = ConfigOption,
           json_object: bool = typer.Option(False, "--json", help="One JSON object (state, run "
                                            "id, session, turn, context %, last event, pid, "
                                            "resumable, heartbeat) and an exit code: 0 running, "
                                            "1 stuck, 3 stopped (resumable), 4 no run, 5 ended."),
           stale_after: Optional[float] = typer.Option(None, "--stale-after", min=0, help="With "
                                                       "--json: a running run whose heartbeat is "
                                                       "older than SECS is `stuck` (exit 1).")
           ) -> None:
    """The current or last run: is it running, where it is, how full its context is."""
    from datetime import datetime, timezone

    from rich.console import Console

    from ouroboros.ui.status import run_status, status_view

    loaded = load_project(config)
    found = guarded(lambda: run_status(loaded.state_dir))
    if json_object:
        raise typer.Exit(print_health(loaded, found, stale_after))
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

    loaded = load_project(config)
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

    loaded = load_project(config)
    events = guarded(lambda: read_log(run_log(loaded, run_id)))
    context = loaded.config.context
    Console().print(stats_view(run_stats(events, context.soft_threshold_pct,
                                         context.hard_threshold_pct),
                               all_sessions=all_sessions))


@app.command()
def logs(
    run_id: Optional[str] = RunIdArgument,
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new events until "
                                "the run ends (or Ctrl+C)."),
    types: Optional[list[str]] = typer.Option(None, "--type", "-t", help="Only events of this "
                                              "type (repeatable), e.g. --type tool_call."),
    config: Optional[Path] = ConfigOption,
) -> None:
    """A run's events, one readable line each."""
    from ouroboros.store.log import read_log
    from ouroboros.ui.follow import follow_events
    from ouroboros.ui.plain import format_any, listed, select_types

    loaded = load_project(config)
    wanted = guarded(lambda: select_types(types or []))
    path = guarded(lambda: run_log(loaded, run_id))
    events = follow_events(path) if follow else guarded(lambda: read_log(path))

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
          config: Optional[Path] = ConfigOption,
          json_lines: bool = JsonOption) -> None:
    """The live dashboard of a run going on in another terminal.

    With --json, its events as JSON lines instead, until the run ends."""
    from ouroboros.ui.dashboard import DashboardState
    from ouroboros.ui.live import watch as watch_log

    loaded = load_project(config)
    path = guarded(lambda: run_log(loaded, run_id))
    if json_lines:
        follow_json(path)
        return
    context = loaded.config.context
    state = DashboardState(soft=context.soft_threshold_pct, hard=context.hard_threshold_pct)
    try:
        watch_log(path, state)
    except KeyboardInterrupt:
        pass


def follow_json(path: Path) -> None:
    """`watch --json`: the log's records as JSON lines, then each new one, until the run
    ends (or Ctrl+C, or the reader goes away)."""
    from ouroboros.ui.follow import follow_events
    from ouroboros.ui.records import json_line

    def show() -> None:
        for event in follow_events(path):
            line = json_line(event)
            if line is not None:
                typer.echo(line)

    try:
        guarded(show)
    except KeyboardInterrupt:
        pass


def print_health(loaded: LoadedConfig, found: RunStatus | None, stale_after: float | None
                 ) -> int:
    """`status --json`: print the run's health as one object; its exit code."""
    import json
    from datetime import datetime, timezone

    from ouroboros.loop.continuation import continue_plan
    from ouroboros.loop.heartbeat import read_heartbeat
    from ouroboros.ui.health import HEALTH_EXIT, run_health

    resumable = False
    if found is not None and not found.running:
        plan = guarded(lambda: continue_plan(loaded.state_dir, found.run_id, {}))
        if plan is not None:
            max_turns = plan.flags.get("agent.max_turns", loaded.config.agent.max_turns)
            resumable = plan.stays(max_turns) is None
    health = run_health(found, resumable=resumable, heartbeat=read_heartbeat(loaded.state_dir),
                        now=datetime.now(timezone.utc), stale_after=stale_after)
    typer.echo(json.dumps(health))
    return HEALTH_EXIT[health["state"]]


def run_log(loaded: LoadedConfig, run_id: str | None) -> Path:
    """The event log of run `run_id` (default: the latest) in the project's state dir."""
    from ouroboros.store.log import EVENTS_FILE, find_run

    return find_run(loaded.state_dir, run_id) / EVENTS_FILE
