"""Where a run stands: `ouroboros status`.

The run is the one holding the workspace lock if its process is alive, else the latest one.
Its numbers are its summary (store/summary.py): the manifest's, as of its newest closed
segment, with its current segment folded in; what the dashboard adds (the alert, the state
words) comes from the newest record of each kind the summary keeps. What `status` reads does
not grow with the turns run.

    status = run_status(state_dir)
    Console().print(status_view(status, now=datetime.now(timezone.utc)))
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from rich.table import Table
from rich.text import Text

from ouroboros.store.events import ConfigChanged, RunEnd, parse_event
from ouroboros.store.holder import LOCK_FILE, live_holder
from ouroboros.store.log import list_runs, read_tail, runs_dir
from ouroboros.store.summary import RunSummary
from ouroboros.ui.dashboard import DashboardState, parse_ts
from ouroboros.ui.numbers import of_budget, threshold, used
from ouroboros.ui.plain import BOOKKEEPING, masked_text

MAX_CHANGES_SHOWN = 4  # the newest config changes `status` lists
SHORT_KEYS = {"context.soft_threshold_pct": "soft", "context.hard_threshold_pct": "hard"}


@dataclass
class RunStatus:
    run_id: str
    state: DashboardState
    owner_pid: int | None  # the live process running it, if any
    end: RunEnd | None  # its run_end record, if it has stopped cleanly since resumed
    changes: list[ConfigChanged] = field(default_factory=list)  # its config_changed records

    @property
    def running(self) -> bool:
        return self.owner_pid is not None

    @property
    def summary(self) -> RunSummary:
        return self.state.summary


def run_status(state_dir: Path) -> RunStatus | None:
    """The current or last run in a state dir, or None when there has been no run."""
    runs = list_runs(state_dir)
    if not runs:
        return None
    live = live_run(state_dir)
    if live is not None and live[0] in runs:
        return replay(state_dir, *live)
    return replay(state_dir, runs[-1], None)


def live_run(state_dir: Path) -> tuple[str, int | None] | None:
    """(run id, pid) of the run whose process holds the state dir's lock now, if any: the
    kernel lock tells, never the pid alone."""
    holder = live_holder(state_dir / LOCK_FILE)
    if holder is None or "run_id" not in holder:
        return None
    return holder["run_id"], holder.get("pid")


def replay(state_dir: Path, run_id: str, owner_pid: int | None) -> RunStatus:
    """One run's status from its manifest and its current segment (never its history);
    `owner_pid` is the live process running it, if any."""
    tail = read_tail(runs_dir(state_dir) / run_id)
    summary = tail.summary()
    state = seeded(summary)
    shown = next((r for r in reversed(tail.records) if r.get("type") not in BOOKKEEPING), None)
    if shown is not None:  # the newest event `logs` shows (not a checkpoint)
        state.last_type, state.last_ts = shown.get("type"), shown.get("ts") or state.last_ts
    end = parse_event(summary.end) if summary.end is not None else None
    changes = [parse_event(r) for r in summary.config_changes]
    return RunStatus(
        run_id,
        state,
        owner_pid,
        end if isinstance(end, RunEnd) else None,
        [c for c in changes if isinstance(c, ConfigChanged)],
    )


def seeded(summary: RunSummary) -> DashboardState:
    """A dashboard state on a run's summary: what the screen adds (the state words, the
    alert) from the newest record of each kind the summary keeps."""
    state = DashboardState(summary=summary)
    for record in summary.anchor_records():
        state.show(parse_event(record))
    if summary.last:
        state.last_type, state.last_ts = summary.last["type"], summary.last["ts"]
    return state


def ago(then: str, now: datetime) -> str:
    """How long ago an event's timestamp was: "12s ago", "5m ago", "3h ago", "2d ago"."""
    secs = max(0, int((now - parse_ts(then)).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit} ago"
    return f"{secs}s ago"


def last_event(state: DashboardState, now: datetime) -> str:
    """The newest event's type and how long ago it was: "tool_result, 12s ago"."""
    if state.last_type and state.last_ts:
        return f"{state.last_type}, {ago(state.last_ts, now)}"
    return "--"


def describe_state(status: RunStatus, config: str = "") -> str:
    """Running or not, how it ended, and the command that goes on with it (with `--config
    PATH` when the person named the project's config so: from elsewhere, the command without
    it would find another project, or none)."""
    return with_config(state_words(status), config)


def with_config(text: str, config: str) -> str:
    """`text` with each `ouroboros resume` in it given `--config config`."""
    if not config:
        return text
    return text.replace("ouroboros resume", f"ouroboros resume --config {shlex.quote(config)}")


def state_words(status: RunStatus) -> str:
    if status.running:
        doing = "stopping" if status.state.status == "stopping" else "running"
        return f"{doing} (pid {status.owner_pid})"
    end = status.end
    if end is not None:
        how = end.next or ("`ouroboros resume` continues it" if end.resumable else "")
        return f"not running: ended ({end.reason}, exit {end.exit_code})" + (
            f"; {how}" if how else ""
        )
    return (
        "not running: stopped without an end record (killed or crashed); "
        "`ouroboros resume` continues it"
    )


def change_line(change: ConfigChanged) -> str:
    """One config change as `status` shows it: "changed at session 5: soft 0.70 -> 0.60"."""
    key = change.key
    old, new = (
        f"{v:.2f}" if key in SHORT_KEYS and isinstance(v, (int, float)) else json.dumps(v)
        for v in (change.old, change.new)
    )
    return f"changed at session {change.session}: {SHORT_KEYS.get(key, key)} {old} -> {new}"


def budget_text(s: DashboardState) -> str:
    """`6,144 tokens (the window less the reply's room); soft 70%, hard 90% of it`."""
    budget = f"{s.budget:,} tokens (the window less the reply's room); " if s.budget else ""
    return f"{budget}soft {threshold(s.soft)}, hard {threshold(s.hard)} of it"


def unanswered_words(status: RunStatus) -> str:
    """What became of a turn asked but not answered (the turn the log's lines name): "";
    "; turn 11 asked, waiting for its reply"; "; turn 11 asked, its reply never came"."""
    turn = status.state.unanswered_turn()
    if turn is None:
        return ""
    return f"; turn {turn} asked, " + (
        "waiting for its reply" if status.running else "its reply never came"
    )


def status_view(status: RunStatus, now: datetime, config: str = "") -> Table:
    """A two-column table: what, and its value. `config`: the `--config` the person gave."""
    s = status.state
    tokens = (
        f" of the budget ({of_budget(s.prompt_tokens, s.budget)})"
        if s.prompt_tokens is not None and s.budget
        else ""
    )
    session_turn, total_turns = s.counted_turns()
    last = last_event(s, now)
    rows = [
        ("run", status.run_id),
        ("state", describe_state(status, config)),
        ("session", str(s.session)),
        (
            "turn",
            f"{session_turn} in this session, {total_turns} in total" + unanswered_words(status),
        ),
        ("context", used(s.context_pct) + tokens),
        ("window", f"{s.context_limit:,} tokens ({s.limit_source})" if s.context_limit else "--"),
        ("budget", budget_text(s)),
        ("restarts", str(s.restarts)),
        ("masking", masked_text(s.masked, s.summary.mask_rounds)),
    ]
    if status.changes:
        shown = status.changes[-MAX_CHANGES_SHOWN:]
        rows.append(("config", "\n".join(change_line(e) for e in shown)))
    rows.append(("last event", last))
    if s.alert is not None:  # the dashboard's alert, wrapped whole: what to do included
        rows.append(("alert", f"{s.alert.clock} {s.alert.text}"))
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    for label, value in rows:
        table.add_row(label, Text(value))
    return table
