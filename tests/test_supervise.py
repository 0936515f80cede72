"""Running under a supervisor (systemd, Kubernetes): `run --continue` as the one command,
exit codes that say what to do next (the table in ouroboros.errors), a state dir that serves
one project, `status --json` and the heartbeat, Prometheus metrics, `--json` event lines."""

from __future__ import annotations

import json
import re
import signal
import socket
from pathlib import Path

import httpx
import pytest

from ouroboros.store.log import list_runs
from tests.crash_helpers import kill, wait_for
from tests.faults.parts_agent import (
    PartsAgent,
    expected_parts,
    held_pid,
    parts_project,
    start_forked,
    stop_and_time,
)
from tests.helpers import make_project, of_type, ouroboros_child, ouroboros_here, run_events

PARTS = 3


def parts(root: Path) -> str:
    path = root / "workspace" / "parts.txt"
    return path.read_text() if path.exists() else ""


def cont(config: Path, *args: str) -> "subprocess.CompletedProcess[str]":  # noqa: F821
    return ouroboros_here("run", "--continue", "--config", str(config), "--headless", *args)


# -- run --continue and the exit codes ------------------------------------------------------


def test_continue_starts_a_run_then_leaves_the_finished_one_finished(tmp_path, scripted_server):
    server = scripted_server(PartsAgent(PARTS))
    config = parts_project(tmp_path, server.base_url)

    first = cont(config)

    assert first.returncode == 0, first.stderr
    assert parts(tmp_path) == expected_parts(PARTS)
    before = run_events(tmp_path)
    assert before[-1]["reason"] == "task_complete" and before[-1]["exit_code"] == 0

    again = cont(config)

    assert again.returncode == 0, again.stderr
    assert "is complete" in again.stderr and len(again.stderr.splitlines()) == 1
    assert len(list_runs(tmp_path / ".ouroboros")) == 1
    assert run_events(tmp_path) == before, "a finished run is left as it was"


@pytest.mark.parametrize(
    "sig,code",
    [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGKILL, -9)],
    ids=["SIGTERM", "SIGINT", "kill-9"],
)
def test_a_stopped_run_exits_128_plus_n_and_continue_finishes_it_once(
    tmp_path, scripted_server, sig, code
):
    server = scripted_server(PartsAgent(PARTS, hold_part=2))
    config = parts_project(tmp_path, server.base_url)
    process = start_forked(tmp_path, "run", "--continue", "--config", str(config))
    try:
        held_pid(tmp_path, process)
        stop_and_time(process, sig)
    finally:
        kill(process)
    assert process.returncode == code
    if sig != signal.SIGKILL:
        end = run_events(tmp_path)[-1]
        assert (end["type"], end["exit_code"], end["resumable"]) == ("run_end", code, True)

    again = cont(config)

    assert again.returncode == 0, again.stderr
    assert parts(tmp_path) == expected_parts(PARTS), "nothing lost, nothing done twice"
    assert len(list_runs(tmp_path / ".ouroboros")) == 1
    assert of_type(run_events(tmp_path), "run_resumed")


def test_continue_with_a_fixed_max_turns_pauses_and_stays_paused(tmp_path, scripted_server):
    """A supervisor's command line is the same at every start: `--max-turns` is the total,
    so a restart does not add turns."""
    server = scripted_server(PartsAgent(10))
    config = parts_project(tmp_path, server.base_url)

    first = cont(config, "--max-turns", "2")
    assert first.returncode == 3, first.stderr  # paused
    assert run_events(tmp_path)[-1]["exit_code"] == 3
    before = run_events(tmp_path)

    again = cont(config, "--max-turns", "2")

    assert again.returncode == 3
    assert "its 2 turns" in again.stderr and len(again.stderr.splitlines()) == 1
    assert run_events(tmp_path) == before


@pytest.mark.parametrize(
    "args,says",
    [
        (("run", "--continue", "--run", "20250101-000000-abcd"), "no run '20250101-000000-abcd'"),
        (("run", "--run", "20250101-000000-abcd"), "add --continue"),
    ],
)
def test_bad_combinations_are_one_line_and_exit_2(tmp_path, args, says):
    config = make_project(tmp_path, "http://127.0.0.1:9")
    result = ouroboros_here(*args, "--config", str(config), "--headless")
    assert result.returncode == 2
    assert says in result.stderr and len(result.stderr.splitlines()) == 1
    assert not list_runs(tmp_path / ".ouroboros")


def test_resume_with_nothing_to_resume_exits_4(tmp_path):
    config = make_project(tmp_path, "http://127.0.0.1:9")
    result = ouroboros_here("resume", "--config", str(config), "--headless")
    assert result.returncode == 4
    assert "no runs" in result.stderr and len(result.stderr.splitlines()) == 1


def test_a_server_down_past_the_retry_budget_exits_1_and_a_missing_model_2(
    tmp_path, scripted_server
):
    down = make_project(tmp_path / "down", "http://127.0.0.1:9")
    assert ouroboros_here("run", "--config", str(down), "--headless").returncode == 1
    server = scripted_server([], model="other")
    missing = make_project(tmp_path / "missing", server.base_url)
    assert ouroboros_here("run", "--config", str(missing), "--headless").returncode == 2


# -- a state dir serves one project ---------------------------------------------------------


def test_a_second_project_pointed_at_a_state_dir_is_refused(tmp_path, scripted_server):
    server = scripted_server(PartsAgent(10))
    first = parts_project(tmp_path / "a", server.base_url)
    assert cont(first, "--max-turns", "1").returncode == 3
    before = run_events(tmp_path / "a")
    second = make_project(
        tmp_path / "b", server.base_url, logging={"state_dir": str(tmp_path / "a" / ".ouroboros")}
    )

    for command in (("run",), ("run", "--continue"), ("resume",)):
        result = ouroboros_here(*command, "--config", str(second), "--headless")
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.splitlines()) == 1
        assert str(tmp_path / "a") in result.stderr and str(tmp_path / "b") in result.stderr

    assert run_events(tmp_path / "a") == before
    assert len(list_runs(tmp_path / "a" / ".ouroboros")) == 1
    assert not any((tmp_path / "b" / "workspace").iterdir())
    owner = json.loads((tmp_path / "a" / ".ouroboros" / "project.json").read_text())
    assert owner == {
        "project": str(tmp_path / "a"),
        "workspace": str(tmp_path / "a" / "workspace"),
        "state_dir": str(tmp_path / "a" / ".ouroboros"),
    }


# -- status --json and the heartbeat ---------------------------------------------------------


def status(config: Path, *args: str) -> tuple[int, dict]:
    result = ouroboros_here("status", "--json", "--config", str(config), *args)
    assert len(result.stdout.splitlines()) == 1, result.stdout + result.stderr
    return result.returncode, json.loads(result.stdout)


def heartbeat(root: Path) -> dict:
    return json.loads((root / ".ouroboros" / "heartbeat").read_text())


def test_status_json_says_running_stopped_ended_or_none(tmp_path, scripted_server):
    server = scripted_server(PartsAgent(PARTS, hold_part=2))
    config = parts_project(
        tmp_path,
        server.base_url,
    )
    with open(config, "a") as toml:
        toml.write("\n[metrics]\nheartbeat_secs = 0.05\n")
    assert status(config) == (4, {"state": "none", "run_id": None, "resumable": False})

    process = start_forked(tmp_path, "run", "--config", str(config))
    try:
        held_pid(tmp_path, process)
        seen = heartbeat(tmp_path)  # may be older than the call: wait for one written after
        beat = wait_for(
            lambda: (b := heartbeat(tmp_path))["beat"] != seen["beat"] and b,
            "a beat after the call started",
            process,
        )
        code, running = status(config)
        assert code == 0 and running["state"] == "running", running
        assert running["pid"] == process.pid and running["doing"] == "tool shell_exec"
        assert running["session"] == 1 and running["turn"] == 2
        # alive while it waits on the tool: the beat moves on, the last event does not
        wait_for(lambda: heartbeat(tmp_path)["beat"] != beat["beat"], "a newer beat", process)
        assert heartbeat(tmp_path)["last_event"] == beat["last_event"]
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    finally:
        kill(process)

    code, stopped = status(config)
    assert (code, stopped["state"], stopped["resumable"]) == (3, "stopped", True)
    assert stopped["pid"] is None and stopped["total_turns"] == 2

    assert cont(config).returncode == 0
    code, ended = status(config)
    assert (code, ended["state"], ended["resumable"]) == (5, "ended", False)
    assert (ended["end_reason"], ended["exit_code"]) == ("task_complete", 0)


# -- metrics ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_metrics_are_served_while_the_run_goes_on(tmp_path, scripted_server):
    server = scripted_server(PartsAgent(PARTS, hold_part=3))
    config = parts_project(tmp_path, server.base_url)
    port = free_port()
    process = start_forked(tmp_path, "run", "--config", str(config), "--metrics-port", str(port))
    try:
        held_pid(tmp_path, process)
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        kill(process)
    assert "ouroboros_turns_total 3.0" in text
    assert 'ouroboros_tool_calls_total{outcome="ok",tool="shell_exec"} 2.0' in text
    window = re.search(r"^ouroboros_context_window_tokens (\S+)$", text, re.M)
    believed = [
        e["context_limit"]
        for e in run_events(tmp_path)
        if e["type"] in ("session_start", "token_usage")
    ]
    assert window and float(window.group(1)) in believed  # the window the run believed
    assert "ouroboros_prompt_tokens_total" in text and "ouroboros_retries_total 0.0" in text


def test_a_metrics_port_in_use_is_one_line_and_exit_2(tmp_path, scripted_server):
    server = scripted_server(PartsAgent(PARTS))
    config = parts_project(tmp_path, server.base_url)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = ouroboros_here(
            "run", "--config", str(config), "--headless", "--metrics-port", str(port)
        )
    assert result.returncode == 2
    assert f"127.0.0.1:{port} is in use" in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert not list_runs(tmp_path / ".ouroboros")


# -- --json ------------------------------------------------------------------------------------


def test_run_json_prints_the_event_records_and_nothing_else(tmp_path, scripted_server):
    server = scripted_server(PartsAgent(PARTS))
    config = parts_project(tmp_path, server.base_url)

    result = ouroboros_child("run", "--json", "--config", str(config))  # its own fd 1

    assert result.returncode == 0, result.stderr
    printed = [json.loads(line) for line in result.stdout.splitlines()]
    logged = [e for e in run_events(tmp_path) if e["type"] != "checkpoint"]
    assert printed == logged
    assert "task complete" in result.stderr  # the people's lines go to stderr

    watched = ouroboros_here("watch", "--json", "--since", "start", "--config", str(config))
    assert watched.returncode == 0
    assert [json.loads(line) for line in watched.stdout.splitlines()] == logged
