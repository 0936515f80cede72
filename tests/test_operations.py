"""Operations a fleet can rely on (#35): waiting for the model server at start, metrics named
as Prometheus expects, exit codes that mean what they say, budgets per run, `--json` followers
that start from the end, systemd's notify protocol, and the examples as written."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
from datetime import datetime
from pathlib import Path

import pytest

from ouroboros.errors import ServerUnreachableError
from ouroboros.testing.server import ScriptedServer
from tests.crash_helpers import kill, wait_for
from tests.faults.parts_agent import PartsAgent, expected_parts, log_text, start_forked
from tests.helpers import Forked, clean_env, make_project, ouroboros_forked, ouroboros_here
from tests.test_supervise import free_port, parts, status

PARTS = 3


# -- 1. waiting for the model server at start ------------------------------------------------


def waiting_project(root: Path, port: int, wait_secs: float) -> Path:
    return make_project(
        root,
        f"http://127.0.0.1:{port}",
        model={"context_limit": 16384, "max_retry_secs": 60, "wait_for_server_secs": wait_secs},
    )


def waiting_beat(root: Path) -> dict | None:
    try:
        beat = json.loads((root / ".ouroboros" / "heartbeat").read_text())
    except (OSError, ValueError):
        return None
    return beat if str(beat.get("doing", "")).startswith("waiting for the model server") else None


def test_a_harness_started_before_its_server_waits_then_runs(tmp_path):
    port = free_port()
    config = waiting_project(tmp_path, port, 120)
    process = start_forked(tmp_path, "run", "--continue", "--config", str(config))
    server = ScriptedServer(PartsAgent(PARTS), port=port)
    try:
        wait_for(lambda: waiting_beat(tmp_path), "the wait for the server", process)
        code, health = status(config)
        assert (code, health["state"]) == (0, "waiting")
        assert health["doing"] == f"waiting for the model server at http://127.0.0.1:{port}"
        server.start()  # the server comes up a moment later, on the port the harness tries
        process.wait(timeout=45)
    finally:
        kill(process)
        server.stop()
    assert process.returncode == 0, log_text(tmp_path)
    assert parts(tmp_path) == expected_parts(PARTS)
    said = log_text(tmp_path)
    assert f"waiting for the model server at http://127.0.0.1:{port} since " in said
    assert "Traceback" not in said


def test_a_stop_signal_ends_the_wait_at_once(tmp_path):
    config = waiting_project(tmp_path, free_port(), 300)
    process = start_forked(tmp_path, "run", "--config", str(config))
    try:
        wait_for(lambda: waiting_beat(tmp_path), "the wait for the server", process)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)  # not the 300 s of the wait
    finally:
        kill(process)
    assert process.returncode == 143
    assert not (tmp_path / ".ouroboros" / "runs").exists() or not list(
        (tmp_path / ".ouroboros" / "runs").iterdir()
    )


def test_a_wait_that_runs_out_exits_1_saying_how_long(tmp_path):
    config = waiting_project(tmp_path, free_port(), 0.3)
    result = ouroboros_here("run", "--config", str(config), "--headless")
    assert result.returncode == 1
    assert "waited 0.3 s for it: model.wait_for_server_secs" in result.stderr
    assert "Traceback" not in result.stderr


def test_wait_for_server_retries_only_unreachable_with_backoff_and_says_so_once():
    from ouroboros.loop.server_wait import WaitNotices, wait_for_server

    tries: list[int] = []
    slept: list[float] = []
    heard: list[str] = []
    now = [0.0]

    async def probe() -> None:
        tries.append(1)
        if len(tries) < 4:
            raise ServerUnreachableError("cannot reach it")

    async def sleep(secs: float) -> None:
        slept.append(secs)
        now[0] += secs

    notices = WaitNotices(heard.append, lambda: heard.append("answers"))
    waited = asyncio.run(
        wait_for_server(
            probe,
            60,
            "http://h:1",
            notices,
            clock=lambda: now[0],
            sleep=sleep,
            now=lambda: datetime(2026, 1, 1, 3, 4, 5),
        )
    )
    assert waited and len(tries) == 4
    assert slept == sorted(slept) and slept[0] > 0
    assert heard == ["waiting for the model server at http://h:1 since 03:04:05", "answers"]


def test_wait_for_server_zero_fails_at_once_and_never_sleeps_past_the_end():
    from ouroboros.loop.server_wait import next_wait, wait_for_server

    async def down() -> None:
        raise ServerUnreachableError("cannot reach it")

    async def no_sleep(secs: float) -> None:
        raise AssertionError("slept")

    with pytest.raises(ServerUnreachableError) as error:
        asyncio.run(wait_for_server(down, 0, "u", sleep=no_sleep))
    assert error.value.message == "cannot reach it"
    assert next_wait(30, 2.5) == 2.5 and next_wait(1, 100) < next_wait(3, 100) <= 10


# -- 2. metrics named as Prometheus expects --------------------------------------------------


def fed_metrics():
    from ouroboros.metrics import RunMetrics
    from ouroboros.store import events as ev

    metrics = RunMetrics()
    for event in [
        ev.SessionStart(
            context_limit=8192, limit_source="ollama", budget=7000, carryover_messages=0
        ),
        ev.Assistant(text="", finish_reason="stop", tool_calls=[]),
        ev.TokenUsage(
            prompt_tokens=3682,
            completion_tokens=40,
            total_tokens=3722,
            context_limit=8192,
            budget=7000,
            context_used_pct=52.6,
            source="server",
        ),
        ev.ToolResultEvent(
            id="c",
            name="shell_exec",
            ok=True,
            bytes=1,
            observation="o",
            truncated=False,
            summary="",
            duration_ms=1,
        ),
        ev.Retry(attempt=1, delay_secs=1.0, error="503"),
    ]:
        event.ts = "2026-01-01T00:00:00.000Z"
        metrics.on_event(event)
    return metrics


def scraped(metrics) -> str:
    from prometheus_client.exposition import generate_latest

    return generate_latest(metrics.registry).decode()


def test_context_used_ratio_is_a_ratio_when_scraped():
    text = scraped(fed_metrics())
    line = next(x for x in text.splitlines() if x.startswith("ouroboros_context_used_ratio "))
    assert float(line.split()[1]) == pytest.approx(0.526)
    assert "# HELP ouroboros_context_used_ratio" in text and "%" not in line


BASE_UNITS = ("seconds", "bytes", "tokens", "ratio", "info")
NOT_BASE_UNITS = (
    "milliseconds",
    "ms",
    "minutes",
    "hours",
    "days",
    "pct",
    "percent",
    "kb",
    "mb",
    "gb",
    "kilobytes",
    "megabytes",
)


def test_every_metric_is_named_as_prometheus_expects():
    """https://prometheus.io/docs/practices/naming/: one prefix, base units as a suffix,
    `_total` for counters and only for them, `_ratio` for 0-1, `_timestamp_seconds` for Unix
    times."""
    import re

    metrics = fed_metrics()
    families = list(metrics.registry.collect())
    assert families
    for family in families:
        name = family.name if family.type != "counter" else f"{family.name}_total"
        assert re.fullmatch(r"ouroboros_[a-z][a-z0-9_]*[a-z0-9]", name), name
        assert "__" not in name, name
        words = name.split("_")
        assert not set(words) & set(NOT_BASE_UNITS), f"{name}: not a base unit"
        assert (family.type == "counter") == name.endswith("_total"), name
        assert family.documentation.strip(), f"{name} has no help"
        if "timestamp" in words:
            assert name.endswith("_timestamp_seconds"), name
        if family.type == "gauge" and name.endswith("_ratio"):
            assert all(0 <= s.value <= 1 for s in family.samples), name
        if "tokens" in words or "seconds" in words or "bytes" in words:
            unit_at = max(words.index(u) for u in ("tokens", "seconds", "bytes") if u in words)
            assert words[unit_at + 1 :] in ([], ["total"]), f"{name}: the unit goes last"


# -- 3. exit codes that mean what they say: an unusable state dir needs a fix -----------------


@pytest.fixture
def read_only_project(tmp_path):
    """A project folder mounted read-only (a bind mount of itself), as on a read-only volume;
    skipped where this process cannot mount (chmod does not stop root)."""
    import subprocess

    project = tmp_path / "project"
    config = make_project(project, "http://127.0.0.1:9")
    bound = subprocess.run(["mount", "--bind", str(project), str(project)], capture_output=True)
    if bound.returncode != 0:
        pytest.skip("cannot make a read-only mount here (needs root and mount rights)")
    try:
        ro = subprocess.run(["mount", "-o", "remount,bind,ro", str(project)], capture_output=True)
        if ro.returncode != 0:
            pytest.skip("cannot remount read-only here")
        yield config
    finally:
        subprocess.run(["umount", "-l", str(project)], capture_output=True)


def test_a_read_only_state_dir_exits_2_naming_the_key(read_only_project):
    result = ouroboros_here("run", "--config", str(read_only_project), "--headless")
    assert result.returncode == 2, result.stderr
    assert "logging.state_dir" in result.stderr and "Read-only file system" in result.stderr
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr


def test_only_errors_a_person_must_fix_are_exit_2():
    import errno

    from ouroboros.loop.startup import needs_fix

    assert needs_fix(OSError(errno.EROFS, "ro")) and needs_fix(OSError(errno.EACCES, "no"))
    assert not needs_fix(OSError(errno.ENOSPC, "full")) and not needs_fix(
        OSError(errno.EDQUOT, "quota")
    )


# -- 8. temporaries a kill left are swept at the next start -----------------------------------


def test_temporaries_left_by_a_kill_are_swept_at_the_next_start(tmp_path, scripted_server):
    import os

    server = scripted_server(PartsAgent(1))
    config = make_project(tmp_path, server.base_url, model={"context_limit": 16384})
    state = tmp_path / ".ouroboros"
    state.mkdir()
    old, new = state / ".ouroboros-0123456789ab.tmp", state / ".ouroboros-fresh0000000.tmp"
    kept = state / "mine.tmp"
    for path in (old, new, kept):
        path.write_text("half a write")
    os.utime(old, (1, 1))
    os.utime(kept, (1, 1))
    result = ouroboros_here("run", "--config", str(config), "--headless")
    assert result.returncode == 0, result.stderr
    assert not old.exists() and new.exists() and kept.exists()


# -- 4. budgets per run -----------------------------------------------------------------------


def test_a_token_budget_pauses_the_run_and_a_raised_one_continues_it(tmp_path, scripted_server):
    from tests.helpers import run_events

    server = scripted_server(PartsAgent(50))
    config = make_project(
        tmp_path, server.base_url, model={"context_limit": 16384}, agent={"max_tokens": 1500}
    )
    first = ouroboros_here("run", "--config", str(config), "--headless")
    assert first.returncode == 3, first.stderr
    end = run_events(tmp_path)[-1]
    assert (end["type"], end["reason"], end["exit_code"]) == ("run_end", "budget", 3)
    assert end["budget"] == "agent.max_tokens" and end["tokens_used"] >= 1500
    assert "raise agent.max_tokens" in end["next"] and "ouroboros resume" in end["next"]
    code, health = status(config)  # a person must raise it: not for a supervisor to go on
    assert (code, health["state"], health["end_reason"]) == (5, "ended", "budget")
    assert health["budget"] == "agent.max_tokens" and health["tokens_used"] == end["tokens_used"]
    turns_before = end["total_turns"]

    again = ouroboros_here("resume", "--config", str(config), "--headless")  # not raised
    assert again.returncode == 3
    assert run_events(tmp_path)[-1]["total_turns"] == turns_before  # not one turn more
    records = len(run_events(tmp_path))
    kept = ouroboros_here("run", "--continue", "--config", str(config), "--headless")
    assert kept.returncode == 3 and "raise agent.max_tokens" in kept.stderr
    assert len(run_events(tmp_path)) == records  # left as it is: nothing written

    raised = make_project(
        tmp_path, server.base_url, model={"context_limit": 16384}, agent={"max_tokens": 4000}
    )
    more = ouroboros_here("resume", "--config", str(raised), "--headless")
    assert more.returncode == 3, more.stderr
    last = run_events(tmp_path)[-1]
    assert last["reason"] == "budget" and last["total_turns"] > turns_before
    assert 4000 <= last["tokens_used"]  # counted across the resume, not from 0 again
    assert last["tokens_used"] > end["tokens_used"]


def test_the_budget_meter_keeps_counting_across_resumes():
    from ouroboros.config.schema import AgentConfig
    from ouroboros.loop.budgets import BudgetMeter, budget_reached, tokens_counted
    from ouroboros.protocols import StopFlag
    from ouroboros.store import events as ev

    class State:
        tokens_used, wall_secs = 0, 0.0

    state, now = State(), [100.0]
    limits = AgentConfig(max_tokens=0, max_wall_secs=60)
    first = BudgetMeter(state, lambda: limits, StopFlag(), clock=lambda: now[0])
    now[0] += 40
    assert first.check() is None and state.wall_secs == 40
    stop = StopFlag()
    resumed = BudgetMeter(state, lambda: limits, stop, clock=lambda: now[0] + 1000)  # later
    now[0] += 25
    assert resumed.check() == "agent.max_wall_secs" and stop.reason == "budget"
    assert state.wall_secs == 65  # 40 before, 25 since: the time stopped does not count
    usage = ev.TokenUsage(
        prompt_tokens=90,
        completion_tokens=10,
        total_tokens=100,
        context_limit=1,
        budget=1,
        context_used_pct=1,
        source="estimate",
        reported=120,
    )
    assert tokens_counted(usage) == 130
    assert budget_reached(10, 5, 10, 0) == "agent.max_tokens"
    assert budget_reached(9, 5, 10, 5) == "agent.max_wall_secs"
    assert budget_reached(10**9, 10**9, 0, 0) is None


def test_a_state_rebuilt_from_the_log_has_what_the_run_spent():
    from ouroboros.loop.budgets import spent_in
    from ouroboros.store import events as ev

    def at(event, ts):
        event.ts = f"2026-01-01T00:{ts}.000Z"
        return event

    usage = dict(context_limit=1, budget=1, context_used_pct=1, source="server")
    events = [
        at(ev.RunStart(run_id="r", version="1", pid=1, config={}), "00:00"),
        at(
            ev.TokenUsage(prompt_tokens=100, completion_tokens=5, total_tokens=105, **usage),
            "00:10",
        ),
        at(
            ev.RunEnd(reason="interrupted", exit_code=143, sessions=1, total_turns=1, restarts=0),
            "00:30",
        ),
        at(
            ev.RunResumed(
                total_turns=1,
                restarts=0,
                torn_line_dropped=False,
                interrupted_tools=[],
                context_limit=1,
                limit_source="x",
                budget=1,
            ),
            "50:00",
        ),
        at(
            ev.TokenUsage(prompt_tokens=200, completion_tokens=5, total_tokens=205, **usage),
            "50:20",
        ),
    ]
    assert spent_in(events) == (310, 50.0)  # 30 s, then 20 s: not the 50 min stopped


# -- 5. followers in JSON start from the end ---------------------------------------------------


def json_records(result) -> list[dict]:
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_json_followers_start_from_the_end_unless_asked_for_history(tmp_path, scripted_server):
    from tests.helpers import run_events

    server = scripted_server(PartsAgent(PARTS))
    config = make_project(tmp_path, server.base_url, model={"context_limit": 16384})
    assert ouroboros_here("run", "--config", str(config), "--headless").returncode == 0
    logged = [e for e in run_events(tmp_path) if e["type"] != "checkpoint"]
    c = ("--config", str(config))

    assert json_records(ouroboros_here("watch", "--json", *c)) == []  # nothing new: it ended
    assert json_records(ouroboros_here("logs", "--follow", "--json", *c)) == []
    assert json_records(ouroboros_here("watch", "--json", "-n", "2", *c)) == logged[-2:]
    assert json_records(ouroboros_here("logs", "-f", "--json", "-n", "3", *c)) == logged[-3:]
    assert json_records(ouroboros_here("watch", "--json", "--since", "start", *c)) == logged
    assert json_records(ouroboros_here("watch", "--json", "--since", "1d", *c)) == logged
    assert json_records(ouroboros_here("logs", "--json", "--since", "2h", *c)) == logged
    assert (
        json_records(ouroboros_here("watch", "--json", "--since", "2999-01-01T00:00:00Z", *c)) == []
    )
    assert json_records(ouroboros_here("logs", "--json", *c)) == logged  # not following: all

    bad = ouroboros_here("watch", "--json", "--since", "yesterday", *c)
    assert bad.returncode == 2 and "--since must be 'start'" in bad.stderr
    assert len(bad.stderr.splitlines()) == 1


def test_since_names_a_time_ago_a_utc_time_or_the_start():
    from datetime import timezone

    from ouroboros.ui.follow import since_cutoff

    now = datetime(2026, 11, 27, 3, 0, tzinfo=timezone.utc)
    assert since_cutoff("start", now) is None
    assert since_cutoff("90s", now) == datetime(2026, 11, 27, 2, 58, 30, tzinfo=timezone.utc)
    assert since_cutoff("2h", now).hour == 1
    assert since_cutoff("2026-11-27T02:00:00Z", now) == datetime(
        2026, 11, 27, 2, tzinfo=timezone.utc
    )
    with pytest.raises(ValueError, match="90s, 10m, 2h, 1d"):
        since_cutoff("soon", now)


# -- 6. systemd's notify protocol --------------------------------------------------------------


def notify_socket(address) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(0.05)
    return sock


def received(sock: socket.socket, messages: list[str]) -> list[str]:
    """Read what has come (each datagram may hold lines), adding to `messages`."""
    while True:
        try:
            messages.extend(sock.recv(4096).decode().splitlines())
        except (socket.timeout, BlockingIOError):
            return messages


def run_under_systemd(tmp_path: Path, config: Path, notify: str) -> Forked:
    """`ouroboros run --headless` forked as systemd starts it: NOTIFY_SOCKET at `notify` and
    a watchdog that wants a ping every 0.1 s."""

    return ouroboros_forked(
        "run",
        "--config",
        str(config),
        "--headless",
        out=tmp_path / "out.txt",
        err=tmp_path / "err.txt",
        env=clean_env(NOTIFY_SOCKET=notify, WATCHDOG_USEC="200000"),
    )


@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
def test_under_systemd_it_says_ready_pings_the_watchdog_and_says_stopping(
    tmp_path, scripted_server, abstract
):
    import os

    from tests.faults.parts_agent import held_pid

    name = (
        f"@ouroboros-test-{os.getpid()}-{id(tmp_path)}"
        if abstract
        else str(tmp_path / "notify.sock")
    )
    sock = notify_socket(b"\0" + name[1:].encode() if abstract else name)
    server = scripted_server(PartsAgent(PARTS, hold_part=2))
    config = make_project(tmp_path, server.base_url, model={"context_limit": 16384})
    process = run_under_systemd(tmp_path, config, name)
    messages: list[str] = []
    try:
        wait_for(lambda: "READY=1" in received(sock, messages), "READY=1", process)
        held_pid(tmp_path, process)  # a tool call holds the turn: the loop still pings
        pings = messages.count("WATCHDOG=1")
        wait_for(
            lambda: received(sock, messages).count("WATCHDOG=1") >= pings + 2,
            "watchdog pings during a tool call",
            process,
        )
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    finally:
        kill(process)
    received(sock, messages)
    sock.close()
    assert process.returncode == 143
    assert messages.index("READY=1") < messages.index("STOPPING=1")
    statuses = [m for m in messages if m.startswith("STATUS=")]
    assert any("session 1" in m for m in statuses) and any("stopping" in m for m in statuses)


def test_a_stopped_harness_goes_quiet_to_the_watchdog_and_reads_stuck(tmp_path, scripted_server):
    """SIGSTOP (a hung harness, as a supervisor sees one): the watchdog pings stop, so
    systemd's WatchdogSec ends it, and `status --json` calls it stuck once its heartbeat is
    older than --stale-after."""
    import os

    from tests.faults.parts_agent import held_pid

    sock = notify_socket(str(tmp_path / "notify.sock"))
    server = scripted_server(PartsAgent(PARTS, hold_part=2))
    config = make_project(
        tmp_path, server.base_url, model={"context_limit": 16384}, metrics={"heartbeat_secs": 0.1}
    )
    process = run_under_systemd(tmp_path, config, str(tmp_path / "notify.sock"))
    messages: list[str] = []
    try:
        wait_for(lambda: "READY=1" in received(sock, messages), "READY=1", process)
        held_pid(tmp_path, process)
        wait_for(lambda: received(sock, messages).count("WATCHDOG=1") >= 2, "pings", process)
        assert status(config, "--stale-after", "5")[1]["state"] == "running"
        os.kill(process.pid, signal.SIGSTOP)
        received(sock, messages)  # what was on its way before the stop
        before = messages.count("WATCHDOG=1")
        code, health = wait_for(
            lambda: (
                (found := status(config, "--stale-after", "0.5"))[1]["state"] == "stuck" and found
            ),
            "status to call the stopped harness stuck",
        )
        assert code == 1 and health["heartbeat_age_secs"] > 0.5
        # Running, it would have pinged every 0.1 s for those 0.5 s; one may have been on
        # its way as the signal landed.
        assert received(sock, messages).count("WATCHDOG=1") - before <= 1
    finally:
        os.kill(process.pid, signal.SIGCONT)
        kill(process)
        sock.close()


def test_without_notify_socket_nothing_is_sent_and_odd_values_are_ignored():
    from ouroboros.loop.systemd import notify_systemd, socket_address, watchdog_interval

    assert not notify_systemd("READY=1", {})
    assert not notify_systemd("READY=1", {"NOTIFY_SOCKET": "/nonexistent/sock"})
    assert socket_address("@name") == b"\0name" and socket_address("relative") is None
    assert watchdog_interval({"WATCHDOG_USEC": "30000000"}, pid=1) == 15.0
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "2"}, pid=1) is None
    assert watchdog_interval({"WATCHDOG_USEC": "x"}) is None and watchdog_interval({}) is None


# -- 8. smaller ones: prune's help, bare `ouroboros` --------------------------------------------


def test_prunes_help_says_what_it_does_without_a_run_id(tmp_path, scripted_server):
    help_text = " ".join(
        ouroboros_here("prune", "--help", env=clean_env(COLUMNS="200")).stdout.split()
    )
    assert "default: every run of the project" in help_text
    assert "default: the latest" not in help_text


def test_bare_ouroboros_prints_the_short_usage_not_an_error_and_the_whole_help():
    result = ouroboros_here()
    assert result.returncode == 2
    said = result.stderr + result.stdout
    assert said.startswith("usage: ouroboros COMMAND") and "error" not in said
    assert "every command: ouroboros --help" in said and len(said.splitlines()) <= 3


def test_status_health_is_waiting_while_the_live_harness_waits_and_stale_by_default():
    from datetime import timezone

    from ouroboros.ui.health import HEALTH_EXIT, default_stale_after, run_health

    now = datetime(2026, 1, 1, 0, 1, 0, tzinfo=timezone.utc)
    beat = {
        "pid": 7,
        "run_id": "r1",
        "beat": "2026-01-01T00:00:55.000Z",
        "doing": "waiting for the model server at http://h:1",
        "since": "2026-01-01T00:00:00.000Z",
    }
    stale_after = default_stale_after(15)
    waiting = run_health(
        None, resumable=False, heartbeat=beat, now=now, stale_after=stale_after, live_run_id="r1"
    )
    assert (waiting["state"], waiting["pid"], HEALTH_EXIT["waiting"]) == ("waiting", 7, 0)
    old = {**beat, "beat": "2026-01-01T00:00:00.000Z"}  # 60 s: more than three beats of 15
    assert (
        run_health(
            None, resumable=False, heartbeat=old, now=now, stale_after=stale_after, live_run_id="r1"
        )["state"]
        == "stuck"
    )
    assert (
        run_health(None, resumable=False, heartbeat=beat, now=now, live_run_id=None)["state"]
        == "none"
    )  # no live harness: not waiting
