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
from ouroboros.loop.server_wait import WaitNotices, next_wait, wait_for_server
from ouroboros.testing.server import ScriptedServer
from tests.crash_helpers import kill, wait_for
from tests.faults.parts_agent import PartsAgent, expected_parts, log_text, start_forked
from tests.helpers import make_project, ouroboros_here
from tests.test_supervise import free_port, parts, status

PARTS = 3


# -- 1. waiting for the model server at start ------------------------------------------------


def waiting_project(root: Path, port: int, wait_secs: float) -> Path:
    return make_project(root, f"http://127.0.0.1:{port}",
                        model={"context_limit": 16384, "max_retry_secs": 60,
                               "wait_for_server_secs": wait_secs})


def waiting_beat(root: Path) -> dict | None:
    try:
        beat = json.loads((root / ".ouroboros" / "heartbeat").read_text())
    except (OSError, ValueError):
        return None
    return beat if str(beat.get("doing", "")).startswith("waiting for the model server") \
        else None


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
    assert not (tmp_path / ".ouroboros" / "runs").exists() or \
        not list((tmp_path / ".ouroboros" / "runs").iterdir())


def test_a_wait_that_runs_out_exits_1_saying_how_long(tmp_path):
    config = waiting_project(tmp_path, free_port(), 0.3)
    result = ouroboros_here("run", "--config", str(config), "--headless")
    assert result.returncode == 1
    assert "waited 0.3 s for it: model.wait_for_server_secs" in result.stderr
    assert "Traceback" not in result.stderr


def test_wait_for_server_retries_only_unreachable_with_backoff_and_says_so_once():
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
    waited = asyncio.run(wait_for_server(probe, 60, "http://h:1", notices, clock=lambda: now[0],
                                         sleep=sleep, now=lambda: datetime(2026, 1, 1, 3, 4, 5)))
    assert waited and len(tries) == 4
    assert slept == sorted(slept) and slept[0] > 0
    assert heard == ["waiting for the model server at http://h:1 since 03:04:05", "answers"]


def test_wait_for_server_zero_fails_at_once_and_never_sleeps_past_the_end():
    async def down() -> None:
        raise ServerUnreachableError("cannot reach it")

    async def no_sleep(secs: float) -> None:
        raise AssertionError("slept")

    with pytest.raises(ServerUnreachableError) as error:
        asyncio.run(wait_for_server(down, 0, "u", sleep=no_sleep))
    assert error.value.message == "cannot reach it"
    assert next_wait(30, 2.5) == 2.5 and next_wait(1, 100) < next_wait(3, 100) <= 10
