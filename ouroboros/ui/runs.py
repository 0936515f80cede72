"""The runs of a project, oldest first: `ouroboros runs`.

Each run is replayed from its log as `status` does; the one whose process holds the workspace
lock is running.

    Console().print(runs_view(project_runs(state_dir), now=datetime.now(timezone.utc)))
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table

from ouroboros.store.log import list_runs
from ouroboros.ui.status import RunStatus, ago, last_event, live_run, replay


def project_runs(state_dir: Path) -> list[RunStatus]:
    """Every run in a state dir, oldest first (run ids sort by their start time)."""
    live = live_run(state_dir)
    return [
        replay(state_dir, run_id, live[1] if live and live[0] == run_id else None)
        for run_id in list_runs(state_dir)
    ]


def run_state(status: RunStatus, *, short: bool = False) -> str:
    """A few words: "running (pid 42)", "ended: task_complete", "ended: error, resumable",
    "stopped (killed?), resumable"; `short` leaves out "ended: "."""
    if status.running:
        return f"running (pid {status.owner_pid})"
    if status.end is None:
        return "stopped (killed?), resumable"
    resumable = ", resumable" if status.end.resumable else ""
    return ("" if short else "ended: ") + f"{status.end.reason}{resumable}"


HEADERS = ("run", "started", "state", "sessions", "turns", "last event")
GAP = 2  # columns between two columns
FORMS = (
    {"short": False, "when": True, "started": True},
    {"short": False, "when": False, "started": True},
    {"short": True, "when": False, "started": True},
    {"short": True, "when": False, "started": False},
)
"""The table's forms, widest first: the last event by type and time, or by time only; the
state with or without "ended: "; with or without when the run started (its id says it)."""


def runs_rows(
    runs: list[RunStatus], now: datetime, *, short: bool, when: bool, started: bool
) -> list[list[str]]:
    """The header and one row per run, in one of the FORMS."""
    rows = [list(HEADERS)]
    for status in runs:
        s = status.state
        last = last_event(s, now) if when else (ago(s.last_ts, now) if s.last_ts else "--")
        began = status.summary.started
        rows.append(
            [
                status.run_id,
                ago(began, now) if began else "--",
                run_state(status, short=short),
                f"{s.session:,}",
                f"{s.total_turns:,}",
                last,
            ]
        )
    return [row[:1] + row[2:] for row in rows] if not started else rows


def table_width(rows: list[list[str]]) -> int:
    return sum(max(len(row[i]) for row in rows) for i in range(len(rows[0]))) + GAP * (
        len(rows[0]) - 1
    )


@dataclass
class RunsView:
    """The table of runs in the widest form that fits the terminal without wrapping a cell
    (`ouroboros runs` at 80 columns leaves out when each run started: its id says it)."""

    runs: list[RunStatus]
    now: datetime

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        forms = [runs_rows(self.runs, self.now, **form) for form in FORMS]
        rows = next((r for r in forms if table_width(r) <= options.max_width), forms[-1])
        table = Table(box=None, padding=(0, GAP, 0, 0), pad_edge=False, header_style="bold")
        for header in rows[0]:
            table.add_column(
                header,
                no_wrap=True,
                overflow="ellipsis",
                justify="right" if header in ("sessions", "turns") else "left",
            )
        for row in rows[1:]:
            table.add_row(*row)
        yield table


def runs_view(runs: list[RunStatus], now: datetime) -> RunsView:
    """A table of runs, newest last: id, started, state, sessions, turns, last event; no cell
    wraps, and on a narrow terminal the table takes a shorter form (FORMS)."""
    return RunsView(runs, now)
