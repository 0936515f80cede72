"""The runs of a project, oldest first: `ouroboros runs`.

Each run is replayed from its log as `status` does; the one whose process holds the workspace
lock is running.

    Console().print(runs_view(project_runs(state_dir), now=datetime.now(timezone.utc)))
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from rich.table import Table

from ouroboros.store.log import list_runs
from ouroboros.ui.status import RunStatus, ago, last_event, live_run, replay


def project_runs(state_dir: Path) -> list[RunStatus]:
    """Every run in a state dir, oldest first (run ids sort by their start time)."""
    live = live_run(state_dir)
    return [replay(state_dir, run_id, live[1] if live and live[0] == run_id else None)
            for run_id in list_runs(state_dir)]


def run_state(status: RunStatus) -> str:
    """A few words: "running (pid 42)", "ended: task_complete", "ended: error, resumable",
    "stopped (killed?), resumable"."""
    if status.running:
        return f"running (pid {status.owner_pid})"
    if status.end is None:
        return "stopped (killed?), resumable"
    resumable = ", resumable" if status.end.resumable else ""
    return f"ended: {status.end.reason}{resumable}"


def runs_view(runs: list[RunStatus], now: datetime) -> Table:
    """A table of runs, newest last: id, started, state, sessions, turns, last event. The id
    and the numbers never wrap; the state and the last event do on a narrow terminal."""
    table = Table(box=None, padding=(0, 2, 0, 0), header_style="bold")
    table.add_column("run", no_wrap=True)
    table.add_column("started", no_wrap=True)
    table.add_column("state", ratio=3)
    table.add_column("sessions", justify="right", no_wrap=True)
    table.add_column("turns", justify="right", no_wrap=True)
    table.add_column("last event", ratio=2)
    for status in runs:
        s = status.state
        started = ago(status.started, now) if status.started else "--"
        table.add_row(status.run_id, started, run_state(status), f"{s.session:,}",
                      f"{s.total_turns:,}", last_event(s, now))
    return table
