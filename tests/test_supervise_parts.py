"""The pure parts of running under a supervisor: the exit code table, the metrics fed from
events, the heartbeat on a fake clock, `status --json`'s states, a state dir's owner."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from ouroboros.errors import ConfigError, end_exit_code, signal_exit_code
from ouroboros.loop.heartbeat import HEARTBEAT_FILE, Heartbeat, read_heartbeat
from ouroboros.metrics import RunMetrics, also
from ouroboros.store import events as ev
from ouroboros.store.owner import OWNER_FILE, check_state_dir, claim_state_dir
from ouroboros.store.summary import RunSummary
from ouroboros.ui.dashboard import DashboardState
from ouroboros.ui.health import HEALTH_EXIT, run_health
from ouroboros.ui.status import RunStatus


@pytest.mark.parametrize(
    "reason,signal,code",
    [
        ("task_complete", None, 0),
        ("idle", None, 3),
        ("max_turns", None, 3),
        ("max_restarts", None, 3),
        ("interrupted", "SIGTERM", 143),
        ("interrupted", "SIGINT", 130),
        ("interrupted_now", "SIGINT", 130),
        ("interrupted", "SIGPIPE", 141),
    ],
)
def test_each_ending_has_the_exit_code_of_the_table(reason, signal, code):
    assert end_exit_code(reason, signal) == code


def test_a_signal_exits_128_plus_its_number():
    assert [signal_exit_code(n) for n in ("SIGINT", "SIGTERM")] == [130, 143]


# -- metrics ---------------------------------------------------------------------------------


def stamped(event: ev.EventBase, session: int = 1) -> ev.EventBase:
    event.session, event.ts = session, "2026-01-01T00:00:00.000Z"
    return event


def result(name: str, ok: bool, interrupted: bool = False) -> ev.ToolResultEvent:
    return ev.ToolResultEvent(
        id="c",
        name=name,
        ok=ok,
        bytes=1,
        observation="o",
        truncated=False,
        summary="",
        duration_ms=1,
        interrupted=interrupted,
    )


def sample(metrics: RunMetrics, name: str, labels: dict[str, str] | None = None) -> float:
    value = metrics.registry.get_sample_value(name, labels or {})
    assert value is not None, name
    return value


def test_metrics_count_what_the_events_say():
    metrics = RunMetrics()
    usage = ev.TokenUsage(
        prompt_tokens=900,
        completion_tokens=100,
        total_tokens=1000,
        context_limit=8192,
        budget=7000,
        context_used_pct=25.0,
        source="server",
    )
    for event in [
        ev.SessionStart(
            context_limit=8192, limit_source="ollama", budget=7000, carryover_messages=0
        ),
        ev.Assistant(text="", finish_reason="tool_calls", tool_calls=[]),
        usage,
        result("shell_exec", True),
        result("shell_exec", False),
        result("file_read", True),
        result("shell_exec", False, interrupted=True),
        ev.Retry(attempt=1, delay_secs=1.0, error="503"),
        ev.ContextMask(
            observations_masked=4,
            total_masked=4,
            tokens_before=10,
            tokens_after=5,
            reclaimed_pct=0.5,
            preflight=False,
        ),
        ev.SessionRestart(previous_turns=3, carryover_messages=2, reason="hard"),
        ev.ContextTruncationDetected(
            reported=4000, estimated=6000, new_limit=4096, limit_source="inferred"
        ),
    ]:
        metrics.on_event(stamped(event, session=2))
    assert sample(metrics, "ouroboros_turns_total") == 1
    assert (
        sample(metrics, "ouroboros_tool_calls_total", {"tool": "shell_exec", "outcome": "error"})
        == 1
    )
    assert (
        sample(
            metrics, "ouroboros_tool_calls_total", {"tool": "shell_exec", "outcome": "interrupted"}
        )
        == 1
    )
    assert (
        sample(metrics, "ouroboros_tool_calls_total", {"tool": "file_read", "outcome": "ok"}) == 1
    )
    assert sample(metrics, "ouroboros_prompt_tokens_total") == 900
    assert sample(metrics, "ouroboros_completion_tokens_total") == 100
    assert sample(metrics, "ouroboros_context_used_ratio") == 0.25
    assert sample(metrics, "ouroboros_retries_total") == 1
    assert sample(metrics, "ouroboros_masked_observations_total") == 4
    assert sample(metrics, "ouroboros_restarts_total") == 1
    assert sample(metrics, "ouroboros_context_window_tokens") == 4096  # the newest belief
    assert sample(metrics, "ouroboros_session") == 2
    assert b"# TYPE ouroboros_turns_total counter" in generate_latest(metrics.registry)


def test_also_tells_both_listeners_in_order():
    heard: list[str] = []
    both = also(lambda e: heard.append("first"), lambda e: heard.append("second"))
    both(ev.WarningEvent(message="x"))
    assert heard == ["first", "second"]


# -- heartbeat -------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.second = 0

    def __call__(self) -> str:
        return f"2026-01-01T00:00:{self.second:02d}.000Z"


def test_the_heartbeat_says_what_the_run_waits_on_and_since_when(tmp_path):
    clock = Clock()
    heartbeat = Heartbeat(tmp_path / HEARTBEAT_FILE, "run-1", now=clock, ticks=lambda: clock.second)
    call = ev.ToolCallEvent(id="c", name="shell_exec", arguments="{}")
    call.ts, call.session, call.turn = "2026-01-01T00:00:00.000Z", 2, 5
    heartbeat.on_event(call)
    clock.second = 30
    heartbeat.beat()  # a beat while the tool runs: alive, no progress
    beat = read_heartbeat(tmp_path)
    assert beat is not None
    assert (beat["run_id"], beat["session"], beat["turn"]) == ("run-1", 2, 5)
    assert (beat["doing"], beat["since"]) == ("tool shell_exec", call.ts)
    assert (beat["last_event"], beat["beat"]) == (call.ts, "2026-01-01T00:00:30.000Z")

    checkpoint = ev.Checkpoint(base=1)
    checkpoint.ts = "2026-01-01T00:00:31.000Z"
    heartbeat.on_event(checkpoint)  # bookkeeping is not progress
    assert read_heartbeat(tmp_path)["last_event"] == call.ts  # type: ignore[index]
    clock.second = 40
    done = result("shell_exec", True)
    done.ts = "2026-01-01T00:00:40.000Z"
    heartbeat.on_event(done)
    assert read_heartbeat(tmp_path)["doing"] == "model"  # type: ignore[index]


def test_events_in_a_burst_are_written_at_most_once_a_second(tmp_path):
    clock = Clock()
    heartbeat = Heartbeat(tmp_path / HEARTBEAT_FILE, "run-1", now=clock, ticks=lambda: clock.second)
    first, second = ev.ToolCallEvent(id="c", name="a", arguments="{}"), result("a", True)
    first.ts = second.ts = clock()
    heartbeat.on_event(first)
    heartbeat.on_event(second)  # the same second: the file keeps the first
    assert read_heartbeat(tmp_path)["last_event_type"] == "tool_call"  # type: ignore[index]
    clock.second = 1
    heartbeat.beat()  # the timer writes what is known
    beat = read_heartbeat(tmp_path)
    assert (beat["beat"], beat["last_event_type"]) == (clock(), "tool_result")  # type: ignore


def test_the_heartbeat_does_not_fail_the_run_when_it_cannot_be_written(tmp_path):
    heartbeat = Heartbeat(tmp_path / "gone" / HEARTBEAT_FILE, "run-1")
    heartbeat.beat()
    assert read_heartbeat(tmp_path / "gone") is None


# -- status --json ---------------------------------------------------------------------------

NOW = datetime(2026, 1, 1, 0, 1, 0, tzinfo=timezone.utc)


def status_of(pid: int | None, end: ev.RunEnd | None = None) -> RunStatus:
    state = DashboardState(summary=RunSummary(session=2, turn=3, turns=10))
    state.last_ts, state.last_type = "2026-01-01T00:00:00.000Z", "tool_call"
    return RunStatus("run-1", state, pid, end)


def test_health_states_and_their_exit_codes():
    beat = {
        "run_id": "run-1",
        "beat": "2026-01-01T00:00:50.000Z",
        "doing": "tool shell_exec",
        "since": "2026-01-01T00:00:00.000Z",
    }
    running = run_health(status_of(42), resumable=True, heartbeat=beat, now=NOW)
    assert (running["state"], running["pid"], running["doing"]) == (
        "running",
        42,
        "tool shell_exec",
    )
    assert (running["heartbeat_age_secs"], running["last_event_age_secs"]) == (10.0, 60.0)
    stuck = run_health(status_of(42), resumable=True, heartbeat=beat, now=NOW, stale_after=5)
    assert stuck["state"] == "stuck"
    other_run = run_health(
        status_of(42), resumable=True, heartbeat={**beat, "run_id": "x"}, now=NOW, stale_after=5
    )
    assert other_run["state"] == "stuck" and other_run["heartbeat_age_secs"] is None
    stopped = run_health(status_of(None), resumable=True, heartbeat=beat, now=NOW)
    assert (stopped["state"], stopped["resumable"], stopped["doing"]) == ("stopped", True, None)
    ended = run_health(status_of(None), resumable=False, heartbeat=None, now=NOW)
    assert (ended["state"], ended["resumable"]) == ("ended", False)
    none = run_health(None, resumable=False, heartbeat=None, now=NOW)
    assert none["state"] == "none"
    assert [HEALTH_EXIT[s] for s in ("running", "stuck", "stopped", "none", "ended")] == [
        0,
        1,
        3,
        4,
        5,
    ]
    json.dumps(running)


# -- a state dir's owner ---------------------------------------------------------------------


def test_a_state_dir_is_claimed_once_and_refused_to_another_project(tmp_path):
    state, a, b = tmp_path / "state", tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    claim_state_dir(state, project=a, workspace=a / "ws")
    claim_state_dir(state, project=a, workspace=a / "other")  # the same project: fine
    assert json.loads((state / OWNER_FILE).read_text())["workspace"] == str(a / "other")
    with pytest.raises(ConfigError) as refused:
        check_state_dir(state, b)
    assert str(a) in refused.value.message and str(b) in refused.value.message
    with pytest.raises(ConfigError):
        claim_state_dir(state, project=b, workspace=b / "ws")


def test_a_project_that_moved_takes_its_state_dir_over(tmp_path):
    state, old, new = tmp_path / "state", tmp_path / "old", tmp_path / "new"
    claim_state_dir(state, project=old, workspace=old / "ws")  # `old` does not exist (moved)
    check_state_dir(state, new)
    claim_state_dir(state, project=new, workspace=new / "ws")
    assert json.loads((state / OWNER_FILE).read_text())["project"] == str(new)


def test_a_copied_project_owns_its_copy_of_the_state_dir(tmp_path):
    import shutil

    original, copy = tmp_path / "original", tmp_path / "copy"
    claim_state_dir(original / ".ouroboros", project=original, workspace=original / "ws")
    shutil.copytree(original, copy)
    check_state_dir(copy / ".ouroboros", copy)  # the original still exists: not shared
    claim_state_dir(copy / ".ouroboros", project=copy, workspace=copy / "ws")
    with pytest.raises(ConfigError):
        check_state_dir(copy / ".ouroboros", original)


def test_a_state_dir_without_an_owner_is_anyones(tmp_path: Path):
    check_state_dir(tmp_path / "fresh", tmp_path)
