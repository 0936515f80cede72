"""The run's files cannot be written (a file size limit, a full disk, a read-only state dir),
or its output goes into a closed pipe: one line and the documented exit code, never a
traceback; an `error` event where the log can still take it; what was written before is
intact, and `ouroboros resume` finishes the task once the cause is gone.

The full disk is a tiny tmpfs mounted on the state dir and the read-only state dir a
read-only bind mount (both need root; without it they are skipped, or use chmod). The runs
are processes forked from the test's (tests.helpers.ouroboros_child: a file size limit is
theirs alone), but the one whose output goes into `head`: a whole `python -m ouroboros` in a
shell pipeline, its stdout a real pipe that closes.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from ouroboros.store.log import EVENTS_FILE, read_events
from ouroboros.store.state_file import STATE_FILE
from ouroboros.testing import Fault
from tests.crash_helpers import WAIT_SECS, CountingAgent, check_conversation, demo_project
from tests.helpers import (
    clean_env,
    of_type,
    ouroboros_child,
    ouroboros_here,
    parts_recorded,
    run_dir,
)

PARTS = 3
MAX_TURNS = 12  # the task takes 2 + 2 * PARTS turns
BIG_PART = 3000  # characters per data file: the snapshot grows by about that per part read


def counting_server(scripted_server) -> tuple[CountingAgent, Any]:
    """The demo agent for PARTS parts, and the scripted server it answers from (and injects
    its faults into)."""
    agent = CountingAgent(PARTS)
    server = agent.server = scripted_server(agent)
    return agent, server


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    output = result.stdout + result.stderr
    assert "Traceback" not in output and "Exception ignored" not in output, output[-2000:]
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def resumes_to_the_end(root: Path, expected: str) -> None:
    """`ouroboros resume` finishes the task: every part recorded once, the log whole."""
    result = ouroboros_here("resume", "--config", str(root / "ouroboros.toml"), "--headless")
    assert result.returncode == 0, result.stderr + result.stdout[-1000:]
    assert (root / "workspace" / "results.txt").read_text() == expected, parts_recorded(root)
    events = read_events(run_dir(root) / EVENTS_FILE).events
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    check_conversation(read_snapshot_messages(root))


def read_snapshot_messages(root: Path) -> list[dict]:
    return json.loads((run_dir(root) / STATE_FILE).read_text())["state"]["messages"]


def limited(max_bytes: int) -> Callable[[], None]:
    """What the run's process does first: no file it writes may grow past `max_bytes`."""

    def prepare() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails: EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    return prepare


def run_until_it_cannot_write(
    config: Path, prepare: Callable[[], None] | None = None
) -> subprocess.CompletedProcess:
    """`ouroboros run` in a process of its own (forked from the test's: its limits are its
    own), `prepare` run there first."""
    return ouroboros_child(
        "run", "--config", str(config), "--headless", timeout=WAIT_SECS, prepare=prepare
    )


def check_failed_write(root: Path, result: subprocess.CompletedProcess, why: str) -> None:
    """Exit 1 with one line saying what could not be written and how to go on; the log is
    readable and, where it could take it, ends with the error."""
    assert result.returncode == 1, result.stderr
    line = one_line_error(result)
    assert why in line and "ouroboros resume" in line, line
    assert str(root / ".ouroboros") in line, line  # a file of the run's, not its output
    log = read_events(run_dir(root) / EVENTS_FILE)
    assert of_type(log.events, "assistant"), "the run did some work first"
    assert log.torn_line is None  # a record the log had no room for is cut off whole
    errors = of_type(log.events, "error")
    if errors:  # the log could take the error: it is there, and the end
        assert errors[-1]["kind"] == "StateError", log.events[-3:]
        assert why in errors[-1]["message"] and log.events[-1]["type"] == "run_end"


def test_a_file_size_limit_ends_the_run_with_one_line_and_resume_finishes(
    tmp_path, scripted_server
):
    _, server = counting_server(scripted_server)
    config, expected = demo_project(
        tmp_path, server.base_url, PARTS, max_turns=MAX_TURNS, chars_per_part=BIG_PART
    )

    result = run_until_it_cannot_write(config, limited(12_000))

    check_failed_write(tmp_path, result, "File too large")
    assert len(parts_recorded(tmp_path)) < PARTS
    resumes_to_the_end(tmp_path, expected)


@contextmanager
def tmpfs(path: Path, size: str) -> Iterator[None]:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_a_full_disk_ends_the_run_with_one_line_and_resume_finishes(tmp_path, scripted_server):
    _, server = counting_server(scripted_server)
    config, expected = demo_project(
        tmp_path, server.base_url, PARTS, max_turns=MAX_TURNS, chars_per_part=BIG_PART
    )
    state_dir = tmp_path / ".ouroboros"
    with tmpfs(state_dir, "24k"):
        result = run_until_it_cannot_write(config)

        check_failed_write(tmp_path, result, "No space left on device")
        subprocess.run(["mount", "-o", "remount,size=4m", str(state_dir)], check=True)
        resumes_to_the_end(tmp_path, expected)


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """`path` read-only, even for root (a read-only bind mount onto itself)."""
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [path, *path.rglob("*")] if p.is_dir()}
        for p in modes:
            p.chmod(0o555)
        try:
            yield
        finally:
            for p, mode in modes.items():
                p.chmod(mode)
        return
    bound = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True)
    if bound.returncode != 0:
        pytest.skip("cannot bind-mount here")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(path)], check=True)
        yield
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def stopped_run(root: Path, server, agent: CountingAgent) -> str:
    """A run that did some work and stopped, resumable (the server refused: 401)."""
    agent.inject_at = {agent.calls + 6: [Fault("status", 401, "unauthorized")]}
    config, expected = demo_project(root, server.base_url, PARTS, max_turns=MAX_TURNS)
    assert ouroboros_here("run", "--config", str(config), "--headless").returncode == 2
    return expected


def tree_bytes(path: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_a_read_only_state_dir_is_one_line_and_changes_nothing(tmp_path, scripted_server):
    agent, server = counting_server(scripted_server)
    expected = stopped_run(tmp_path, server, agent)
    config = str(tmp_path / "ouroboros.toml")
    state_dir = tmp_path / ".ouroboros"
    before = tree_bytes(state_dir)

    with read_only(state_dir):
        # One after another: side by side, one would meet the other's workspace lock.
        resumed, started = (
            ouroboros_child(*args)
            for args in (
                ["resume", "--config", config, "--headless"],
                ["run", "--config", config, "--headless"],
            )
        )
        status = ouroboros_here("status", "--config", config)

        for result in (resumed, started):  # a person must act: exit 2, not restarted
            assert result.returncode == 2, result.stderr
            line = one_line_error(result)
            assert str(state_dir) in line and "Read-only file system" in line, line
            assert "logging.state_dir" in line, line
        assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr
        assert tree_bytes(state_dir) == before
    resumes_to_the_end(tmp_path, expected)


def test_output_into_a_closed_pipe_stops_the_run_gracefully_and_resumably(
    tmp_path, scripted_server
):
    """`ouroboros run --headless | head -2`: the run stops as if by one Ctrl+C (the stop is
    recorded, exit 141 = 128 + SIGPIPE, as a shell reports it), says nothing more, and resume
    finishes the task."""
    _, server = counting_server(scripted_server)
    config, expected = demo_project(tmp_path, server.base_url, PARTS, max_turns=MAX_TURNS)
    command = (
        f"{sys.executable} -m ouroboros run --config {config} --headless | head -2; "
        "exit ${PIPESTATUS[0]}"
    )

    result = subprocess.run(
        ["bash", "-c", command],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )

    assert result.returncode == 141, result.stderr
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr
    assert result.stderr == "" and len(result.stdout.splitlines()) == 2
    events = read_events(run_dir(tmp_path) / EVENTS_FILE).events
    assert [e["signal"] for e in of_type(events, "stop_requested")] == ["SIGPIPE"]
    end = events[-1]
    assert end["type"] == "run_end" and end["exit_code"] == 141, end
    assert len(parts_recorded(tmp_path)) < PARTS
    resumes_to_the_end(tmp_path, expected)
