"""`ouroboros status --json`: where the project's run stands, as one JSON object for a probe
or a script, and an exit code a supervisor can act on.

    state     exit  meaning
    running   0     a harness process holds the run (and its heartbeat is fresh)
    waiting   0     a harness process has started (or resumed) the run and waits for the model
                    server to answer (model.wait_for_server_secs)
    stuck     1     it holds the run, but its heartbeat is older than --stale-after
    stopped   3     not running, and `ouroboros run --continue` would go on with it
    none      4     the project has no run yet
    ended     5     not running, and nothing to go on with without a person (complete, out
                    of turns, or paused on a budget still spent): its `run_end` says what

    health = run_health(status, resumable=True, heartbeat=read_heartbeat(state_dir), now=now)
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ouroboros.ui.dashboard import parse_ts
from ouroboros.ui.status import RunStatus

HEALTH_EXIT = {"running": 0, "waiting": 0, "stuck": 1, "stopped": 3, "none": 4, "ended": 5}
WAITING = "waiting for the model server"  # how the heartbeat's `doing` begins meanwhile
STALE_BEATS = 3  # a running run's heartbeat older than this many intervals is stuck
# How far ahead of this clock a heartbeat may be dated and still count (clocks drift a little);
# one dated further ahead proves nothing about the run now.
FUTURE_SLACK_SECS = 5.0


def default_stale_after(heartbeat_secs: float) -> float:
    """`--stale-after` when not given: three heartbeats (metrics.heartbeat_secs) and a second."""
    return STALE_BEATS * heartbeat_secs + 1.0


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


def run_state(
    status: RunStatus | None, resumable: bool, beat_age: float | None, stale_after: float | None
) -> str:
    """One of HEALTH_EXIT's states."""
    if status is None:
        return "none"
    if status.running:
        stale = stale_after is not None and (beat_age is None or beat_age > stale_after)
        return "stuck" if stale else "running"
    return "stopped" if resumable else "ended"


def waiting_health(
    heartbeat: dict[str, Any], now: datetime, stale_after: float | None
) -> dict[str, Any]:
    """The object `status --json` prints while the live harness waits for the model server
    (its run may not be recorded yet)."""
    beat_age = beat_age_secs(heartbeat.get("beat"), now)
    stale = stale_after is not None and (beat_age is None or beat_age > stale_after)
    return {
        "state": "stuck" if stale else "waiting",
        "run_id": heartbeat.get("run_id"),
        "pid": heartbeat.get("pid"),
        "heartbeat_age_secs": beat_age,
        "doing": heartbeat.get("doing"),
        "doing_since": heartbeat.get("since"),
        "resumable": True,
    }


def is_waiting(heartbeat: dict[str, Any] | None, live_run_id: str | None) -> bool:
    """Whether the heartbeat is that of the live harness (holding run `live_run_id`) and says
    it waits for the model server."""
    return (
        heartbeat is not None
        and live_run_id is not None
        and heartbeat.get("run_id") == live_run_id
        and str(heartbeat.get("doing") or "").startswith(WAITING)
    )


def run_health(
    status: RunStatus | None,
    *,
    resumable: bool,
    heartbeat: dict[str, Any] | None,
    now: datetime,
    stale_after: float | None = None,
    live_run_id: str | None = None,
) -> dict[str, Any]:
    """The object `status --json` prints. `heartbeat` counts only when it is this run's;
    `live_run_id`: the run the live harness holds the workspace for, if any."""
    if is_waiting(heartbeat, live_run_id):
        assert heartbeat is not None
        return waiting_health(heartbeat, now, stale_after)
    if status is not None and heartbeat is not None and heartbeat.get("run_id") != status.run_id:
        heartbeat = None
    beat = heartbeat or {}
    beat_age = beat_age_secs(beat.get("beat"), now)
    state = run_state(status, resumable, beat_age, stale_after)
    if status is None:
        return {"state": state, "run_id": None, "resumable": False}
    s, end = status.state, status.end
    turn, total_turns = s.counted_turns()  # as `status` and the dashboard count them
    totals = status.summary.totals()
    return {
        "state": state,
        "run_id": status.run_id,
        "pid": status.owner_pid,
        "session": s.session,
        "turn": turn,
        "total_turns": total_turns,
        "unanswered_turn": s.unanswered_turn(),
        "context_pct": s.context_pct,
        "context_limit": s.context_limit,
        "restarts": s.restarts,
        "masked": s.masked,
        "prompt_tokens": totals["prompt_tokens"],
        "completion_tokens": totals["completion_tokens"],
        "cached_tokens": totals["cached_tokens"],
        "cache_hit_pct": status.summary.cache_hit_pct,
        "last_event": s.last_ts,
        "last_event_type": s.last_type,
        "last_event_age_secs": age_secs(s.last_ts, now),
        "heartbeat_age_secs": beat_age,
        "doing": beat.get("doing") if status.running else None,
        "doing_since": beat.get("since") if status.running else None,
        "resumable": state == "stopped" or (state in ("running", "stuck")),
        "end_reason": end.reason if end is not None else None,
        "exit_code": end.exit_code if end is not None else None,
        "budget": (end.budget or None) if end is not None else None,
        "tokens_used": end.tokens_used if end is not None else None,
        "wall_secs": end.wall_secs if end is not None else None,
    }
