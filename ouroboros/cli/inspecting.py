"""Looking at runs without touching them: `ouroboros status`, `runs`, `stats`, `logs` and
`watch`; and `prune`, which removes the history retention lets go."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ouroboros.cli.common import (
    ConfigOption,
    JsonOption,
    RunIdArgument,
    app,
    fail,
    guarded,
    load_for_reading,
    load_project,
    run_path,
)

if TYPE_CHECKING:
    from datetime import datetime

    from ouroboros.config import LoadedConfig
    from ouroboros.store.events import EventBase
    from ouroboros.ui.status import RunStatus


@app.command(short_help="The current or last run: where it is, how full its context.")
def status(
    config: Optional[Path] = ConfigOption,
    json_object: bool = typer.Option(
        False,
        "--json",
        help="One JSON object (state, run "
        "id, session, turn, context %, last event, pid, "
        "resumable, heartbeat) and an exit code: 0 running "
        "(or waiting for the model server), 1 stuck, 3 "
        "stopped (resumable), 4 no run, 5 ended.",
    ),
    stale_after: Optional[float] = typer.Option(
        None,
        "--stale-after",
        min=0,
        metavar="SECS",
        help="With "
        "--json: a running run whose heartbeat is "
        "older than SECS is `stuck` (exit 1); "
        "default: 3 heartbeats "
        "(metrics.heartbeat_secs) and 1 s.",
    ),
) -> None:
    """The current or last run: is it running, where it is, how full its context is."""
    from datetime import datetime, timezone

    from rich.console import Console

    from ouroboros.ui.status import run_status, status_view

    loaded = load_for_reading(config, "status")
    found = guarded(lambda: run_status(loaded.state_dir))
    if json_object:
        raise typer.Exit(print_health(loaded, found, stale_after))
    if found is None:
        typer.echo(f"no runs yet in {loaded.state_dir}")
        return
    view = status_view(
        found, now=datetime.now(timezone.utc), config=str(config) if config is not None else ""
    )
    guarded(lambda: Console().print(view))


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
    view = runs_view(found, now=datetime.now(timezone.utc))
    guarded(lambda: Console().print(view))


@app.command(short_help="Per-session numbers and a chart of context use.")
def stats(
    run_id: Optional[str] = RunIdArgument,
    config: Optional[Path] = ConfigOption,
    all_sessions: bool = typer.Option(
        False, "--all", help="List every session (a long run shows its first and last few)."
    ),
) -> None:
    """Per-session numbers and a chart of context use over the run's turns: by default from
    the summary the manifest keeps and the current segment; with --all from every record."""
    from rich.console import Console

    from ouroboros.store.log import read_tail, run_records
    from ouroboros.ui.stats import run_stats, stats_view, summary_stats
    from ouroboros.ui.status import live_run

    loaded = load_for_reading(config, "stats")
    run_dir = guarded(lambda: run_path(loaded, run_id))
    context = loaded.config.context
    soft, hard = context.soft_threshold_pct, context.hard_threshold_pct
    tail = guarded(lambda: read_tail(run_dir))
    say_problem(tail.manifest.problem)
    summary = None if all_sessions else tail.summary()
    if summary is not None and summary.complete:
        stats = summary_stats(summary, soft, hard)
    else:
        if not all_sessions:
            typer.echo(
                f"({run_dir} was logged before its figures were kept: reading the whole "
                "log; a resume keeps them from then on)",
                err=True,
            )
        stats = guarded(lambda: run_stats(run_records(run_dir, tail=tail), soft, hard))
    live = guarded(lambda: live_run(loaded.state_dir))
    view = stats_view(
        stats, all_sessions=all_sessions, running=live is not None and live[0] == run_dir.name
    )
    guarded(lambda: Console().print(view))


def say_problem(problem: str | None) -> None:
    """A damaged or missing manifest, rebuilt from the segments: one line saying so."""
    if problem is not None:
        typer.echo(f"warning: {problem}", err=True)


class StopAtEnd:
    """A `wait` for follow_run that ends the reading where the log ends now (for `logs
    --since` without --follow)."""

    class Reached(Exception):
        pass

    def __call__(self) -> None:
        raise StopAtEnd.Reached()


SinceOption = typer.Option(
    None,
    "--since",
    metavar="WHEN",
    show_default=False,
    help="Only events written since WHEN: 'start' (the whole log), a "
    "time ago (90s, 10m, 2h, 1d) or a UTC time (2026-11-27T02:00:00Z).",
)


def since_option(since: str | None) -> datetime | None:
    """The time `--since` names (None: not given, or 'start'); a bad one is one line, exit 2."""
    from datetime import datetime, timezone

    from ouroboros.errors import UsageError
    from ouroboros.ui.follow import since_cutoff

    if since is None:
        return None
    try:
        return since_cutoff(since, datetime.now(timezone.utc))
    except ValueError as error:
        raise fail(UsageError(str(error))) from None


def history(tail: int | None, since: str | None, default: int) -> int | None:
    """How many past events a follower shows first: all (None) with --since, else -n, else
    `default` (0: from the end)."""
    if since is not None:
        return None
    return default if tail is None else tail


FOLLOW_TAIL = 10
"""Events `logs --follow` shows before following, unless given -n (as `tail -f`)."""


@app.command()
def logs(
    run_id: Optional[str] = RunIdArgument,
    follow: bool = typer.Option(
        False,
        "--follow",
        "-f",
        help="Show the last events (10, or -n), then each new one until the run ends (or Ctrl+C).",
    ),
    tail: Optional[int] = typer.Option(
        None,
        "--tail",
        "-n",
        metavar="N",
        show_default=False,
        help="Only the last N events (of the --type asked for; "
        "read from the end of the log, however long the "
        "run).",
    ),
    types: Optional[list[str]] = typer.Option(
        None,
        "--type",
        "-t",
        metavar="TYPE",
        help="Only events of this type (repeatable), e.g. --type tool_call.",
    ),
    since: Optional[str] = SinceOption,
    json_lines: bool = typer.Option(
        False,
        "--json",
        help="Each event as one JSON object per "
        "line (the log's records, checkpoints left out); with "
        "--follow, from the end unless -n or --since asks for "
        "history.",
    ),
    config: Optional[Path] = ConfigOption,
) -> None:
    """A run's events, one readable line each, across the log's segments."""
    from ouroboros.errors import UsageError
    from ouroboros.store.events import parse_event
    from ouroboros.store.log import last_records, read_run_log, read_tail
    from ouroboros.ui.follow import follow_run
    from ouroboros.ui.plain import format_any, listed, select_types
    from ouroboros.ui.records import json_line

    if tail is not None and tail < 0:
        raise fail(UsageError(f"-n/--tail must be 0 or more events, got {tail}"))
    cutoff = since_option(since)
    loaded = load_for_reading(config, "logs")
    wanted = guarded(lambda: select_types(types or []))
    run_dir = guarded(lambda: run_path(loaded, run_id))
    count = history(tail, since, 0 if json_lines else FOLLOW_TAIL) if follow else tail
    events: Iterable[EventBase]
    shown = lambda kind: listed(kind, wanted)  # noqa: E731
    if follow or since is not None:
        events = follow_run(
            run_dir,
            newest=count if follow else None,
            kept=shown,
            since=cutoff,
            wait=None if follow else StopAtEnd(),
        )
    else:  # the manifest (rebuilt once, where damaged) and the current segment, read once
        read = guarded(lambda: read_tail(run_dir))
        say_problem(read.manifest.problem)
        events = (
            read_run_log(run_dir, read)
            if count is None
            else [
                parse_event(r) for r in guarded(lambda: last_records(run_dir, count, shown, read))
            ]
        )
    print_events(events, shown, json_line if json_lines else format_any)


def print_events(
    events: Iterable[EventBase],
    shown: Callable[[str], bool],
    line_of: Callable[[EventBase], str | None],
) -> None:
    """`logs`: one line for each event of a type `shown` accepts, until the events end (or
    Ctrl+C, or the reader goes away)."""

    def show() -> None:
        try:
            for event in events:
                if shown(event.type) and (line := line_of(event)) is not None:
                    typer.echo(line)
        except StopAtEnd.Reached:
            pass

    try:
        guarded(show)
    except KeyboardInterrupt:
        pass


@app.command()
def watch(
    run_id: Optional[str] = RunIdArgument,
    config: Optional[Path] = ConfigOption,
    json_lines: bool = JsonOption,
    tail: Optional[int] = typer.Option(
        None,
        "--tail",
        "-n",
        metavar="N",
        min=0,
        show_default=False,
        help="With --json: first the last N events (default: none, from the end).",
    ),
    since: Optional[str] = SinceOption,
) -> None:
    """The live dashboard of a run going on in another terminal.

    With --json, its events as JSON lines instead, from the end (only what is written from
    now on, unless -n or --since asks for history), until the run ends."""
    from ouroboros.ui.dashboard import DashboardState
    from ouroboros.ui.live import watch as watch_log

    cutoff = since_option(since)
    loaded = load_for_reading(config, "watch")
    run_dir = guarded(lambda: run_path(loaded, run_id))
    if json_lines:
        follow_json(run_dir, history(tail, since, 0), cutoff)
        return
    context = loaded.config.context
    state = DashboardState(soft=context.soft_threshold_pct, hard=context.hard_threshold_pct)
    try:
        guarded(lambda: watch_log(run_dir, state))
    except KeyboardInterrupt:
        pass


def follow_json(run_dir: Path, newest: int | None, since: datetime | None) -> None:
    """`watch --json`: the `newest` N records (None: all, or all `since`) as JSON lines, then
    each new one, until the run ends (or Ctrl+C, or the reader goes away)."""
    from ouroboros.ui.follow import follow_run
    from ouroboros.ui.records import json_line

    def show() -> None:
        for event in follow_run(run_dir, newest=newest, since=since):
            line = json_line(event)
            if line is not None:
                typer.echo(line)

    try:
        guarded(show)
    except KeyboardInterrupt:
        pass


def print_health(loaded: LoadedConfig, found: RunStatus | None, stale_after: float | None) -> int:
    """`status --json`: print the run's health as one object; its exit code."""
    import json
    from datetime import datetime, timezone

    from ouroboros.loop.continuation import summary_plan
    from ouroboros.loop.heartbeat import read_heartbeat
    from ouroboros.store.log import runs_dir
    from ouroboros.ui.health import HEALTH_EXIT, default_stale_after, run_health
    from ouroboros.ui.status import live_run

    resumable = False
    if found is not None and not found.running:  # from the summary `status` read, not again
        run_dir = runs_dir(loaded.state_dir) / found.run_id
        plan = guarded(lambda: summary_plan(run_dir, found.summary, {}, None))
        max_turns = plan.flags.get("agent.max_turns", loaded.config.agent.max_turns)
        agent = loaded.config.agent
        resumable = plan.stays(max_turns, agent.max_tokens, agent.max_wall_secs) is None
    live = guarded(lambda: live_run(loaded.state_dir))
    if stale_after is None:
        stale_after = default_stale_after(loaded.config.metrics.heartbeat_secs)
    health = run_health(
        found,
        resumable=resumable,
        heartbeat=read_heartbeat(loaded.state_dir),
        now=datetime.now(timezone.utc),
        stale_after=stale_after,
        live_run_id=live[0] if live is not None else None,
    )
    guarded(lambda: typer.echo(json.dumps(health)))
    return HEALTH_EXIT[health["state"]]


@app.command(short_help="Remove old log segments and tool results, as [logging] keeps.")
def prune(
    run_id: Optional[str] = typer.Argument(
        None,
        metavar="RUN_ID",
        show_default=False,
        help="The run to prune (default: every run of the project).",
    ),
    config: Optional[Path] = ConfigOption,
) -> None:
    """Apply the retention of `[logging]` (keep_mb, keep_sessions, keep_days) now, to one run
    or to every run of the project, and say what was freed. A running run applies it by
    itself whenever it closes a log segment."""
    from ouroboros.loop.startup import retention
    from ouroboros.store.log import find_run, list_runs, prune_run, runs_dir

    loaded = load_project(config)
    keep = retention(loaded)
    ids = [run_id] if run_id is not None else list_runs(loaded.state_dir)
    if not ids:
        typer.echo(f"no runs yet in {loaded.state_dir}")
    for name in ids:
        run_dir = guarded(
            lambda: (
                find_run(loaded.state_dir, name)
                if run_id is not None
                else runs_dir(loaded.state_dir) / name
            )
        )
        freed = guarded(lambda: prune_run(run_dir, keep))
        typer.echo(f"{run_dir.name}: {freed.describe()}")
