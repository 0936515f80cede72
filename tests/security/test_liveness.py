"""A dead harness's pid is not believed: after a `kill -9` the lock file still names it, and
the pid may be another process's by now. `status`, `tell` and `reload` ask the kernel lock
who runs the run, and never signal a process that does not hold it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ouroboros.cli import app
from ouroboros.store.holder import LOCK_FILE
from tests.helpers import hold_state_lock
from tests.ui_sample import RUN_ID, write_sample_run


def invoke(*args: str):
    env: dict[str, str | None] = {
        name: None for name in os.environ if name.startswith("OUROBOROS_") or name == "OLLAMA_HOST"
    }
    env.update(COLUMNS="120", XDG_CONFIG_HOME="/nonexistent-ouroboros-test")
    return CliRunner().invoke(app, list(args), env=env)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project whose run was killed: no end record."""
    config = tmp_path / "ouroboros.toml"
    config.write_text("")
    write_sample_run(tmp_path / ".ouroboros", ended=False)
    return config


BYSTANDER = """
import signal, sys
seen = []
signal.signal(signal.SIGHUP, lambda number, frame: seen.append("SIGHUP"))
print("ready", flush=True)
sys.stdin.readline()
print(",".join(seen) or "none", flush=True)
"""


@pytest.fixture
def unrelated(project: Path) -> Iterator[subprocess.Popen[str]]:
    """A live process that is not a harness, named by the dead harness's lock file (its pid
    reused), which no process holds; it notes every SIGHUP it gets."""
    bystander = subprocess.Popen(
        [sys.executable, "-c", BYSTANDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert bystander.stdout is not None and bystander.stdout.readline() == "ready\n"
    (project.parent / ".ouroboros" / LOCK_FILE).write_text(
        json.dumps({"pid": bystander.pid, "host": socket.gethostname(), "run_id": RUN_ID})
    )
    yield bystander
    bystander.kill()
    bystander.wait()


def signals_seen(process: subprocess.Popen[str]) -> str:
    """The signals `process` got until now ("none"): a signal sent before it is asked is
    handled before it reads the question."""
    out, _ = process.communicate("?\n", timeout=30)
    return out.strip()


def test_status_does_not_call_a_run_running_on_a_reused_pid(
    project: Path, unrelated: subprocess.Popen[str]
) -> None:
    shown = invoke("status", "-c", str(project))
    probed = invoke("status", "--json", "-c", str(project))

    assert shown.exit_code == 0, shown.output
    assert "not running: stopped without an end record" in " ".join(shown.output.split())
    assert f"pid {unrelated.pid}" not in shown.output
    health = json.loads(probed.stdout)
    assert probed.exit_code == 3 and health["state"] == "stopped" and health["pid"] is None


def test_reload_does_not_signal_a_process_that_does_not_hold_the_lock(
    project: Path, unrelated: subprocess.Popen[str]
) -> None:
    result = invoke("reload", "-c", str(project))

    assert result.exit_code == 2
    assert result.stderr == (
        f"error: no run is going on in {project.parent / '.ouroboros'}; a "
        "new value is read when a run starts or resumes\n"
    )
    assert signals_seen(unrelated) == "none"


def test_tell_does_not_say_it_reached_a_dead_harness(
    project: Path, unrelated: subprocess.Popen[str]
) -> None:
    result = invoke("tell", "Skip part 7.", "-c", str(project))

    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("no run is going on: the message waits")
    assert signals_seen(unrelated) == "none"


def test_a_heartbeat_from_the_future_is_not_a_fresh_one(project: Path) -> None:
    state_dir = project.parent / ".ouroboros"
    (state_dir / "heartbeat").write_text(
        json.dumps({"pid": os.getpid(), "run_id": RUN_ID, "beat": "2999-01-01T00:00:00.000Z"})
    )
    held = hold_state_lock(
        state_dir, {"pid": os.getpid(), "host": socket.gethostname(), "run_id": RUN_ID}
    )
    try:
        probed = invoke("status", "--json", "--stale-after", "60", "-c", str(project))
    finally:
        os.close(held)
    stopped = invoke("status", "--json", "-c", str(project))

    assert probed.exit_code == 1 and json.loads(probed.stdout)["state"] == "stuck"
    assert stopped.exit_code == 3 and json.loads(stopped.stdout)["state"] == "stopped"
