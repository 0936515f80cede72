"""`ouroboros status --json`: where the project's run stands, as one JSON object for a probe
or a script, and an exit code a supervisor can act on.

    state     exit  meaning
    running   0     a harness process holds the run (and its heartbeat is fresh)
    stuck     1     it holds the run, but its heartbeat is older than --stale-after
    stopped   3     not running, and `ouroboros run --continue` would go on with it
    none      4     the project has no run yet
    ended     5     not running, and nothing to go on with without a person (complete, or
                    out of turns): `ouroboros resume --message/--max-turns` says what

    health = run_health(status, resumable=True, heartbeat=read_heartbeat(state_dir), now=now)
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ouroboros.ui.dashboard import parse_ts
from ouroboros.ui.status import RunStatus

HEALTH_EXIT = {"running": 0, "stuck": 1, "stopped": 3, "none": 4, "ended": 5}
# How far ahead of this clock a heartbeat may be dated and still count (clocks drift a little);
# one dated further ahead proves nothing about the run now.
FUTURE_SLACK_SECS = 5.0


def age_secs(ts: str | None, now: datetime) -> float | None:
    """Seconds since an ISO 8601 timestamp (as the log writes them), or None."""
    if not ts:
        return None
    try:
        return round(max(0.0, (now - parse_ts(ts)).total_seconds()), 3)
    except ValueError:
        return None


def beat_age_secs(ts: str | None, now: datetime) -> float | None:
    """A heartbeat's age, or None when it has none or it is dated ahead of `now` (beyond
    FUTURE_SLACK_SECS): a beat from the future is no sign the process is alive now."""
    if not ts:
        return None
    try:
        ahead = (parse_ts(ts) - now).total_seconds()
    except (ValueError, TypeError):  # not a timestamp, or one without its zone
        return None
    return None if ahead > FUTURE_SLACK_SECS else age_secs(ts, now)


def run_state(status: RunStatus | None, resumable: bool, beat_age: float | None,
              stale_after: float | None) -> str:
    """One of HEALTH_EXIT's states."""
    if status is None:
        return "none"
    if status.running:
        stale = stale_after is not None and (beat_age is None or beat_age > stale_after)
        return "stuck" if stale else "running"
    return "stopped" if resumable else "ended"


def run_health(status: RunStatus | None, *, resumable: bool, heartbeat: dict[str, Any] | None,
               now: datetime, stale_after: float | None = None) -> dict[str, Any]:
    """The object `status --json` prints. `heartbeat` counts only when it is this run's."""
    if status is not None and heartbeat is not None \
            and heartbeat.get("run_id") != status.run_id:
        heartbeat = None
    beat = heartbeat or {}
    beat_age = beat_age_secs(beat.get("beat"), now)
    state = run_state(status, resumable, beat_age, stale_after)
    if status is None:
        return {"state": state, "run_id": None, "resumable": False}
    s, end = status.state, status.end
    return {
        "state": state, "run_id": status.run_id, "pid": status.owner_pid,
        "session": s.session, "turn": s.turn, "total_turns": s.total_turns,
        "context_pct": s.context_pct, "context_limit": s.context_limit,
        "last_event": s.last_ts, "last_event_type": s.last_type,
        "last_event_age_secs": age_secs(s.last_ts, now),
        "heartbeat_age_secs": beat_age, "doing": beat.get("doing") if status.running else None,
        "doing_since": beat.get("since") if status.running else None,
        "resumable": state == "stopped" or (state in ("running", "stuck")),
        "end_reason": end.reason if end is not None else None,
        "exit_code": end.exit_code if end is not None else None,
    }
