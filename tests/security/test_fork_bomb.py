"""A fork bomb that times out: its process group is reported killed only once none of it is
left (the dead the harness must reap, reaped), within a bounded wait; a group that cannot be
killed is reported as such, with how many of its processes are left. As root and as an
unprivileged user (tests.security.accounts)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from ouroboros.tools.shell import KILL_WAIT_SECS, Outcome, status_line
from tests.security.accounts import as_probe_user, probe_workspace

# A tree of subshells seven deep (at most 255 of them, each with a `sleep`), its output away
# from the pipe: the shell's output closes as soon as the shell dies, the rest still dying.
BOMB = (
    "echo $$ > sh.pid; f() { if [ $1 -gt 0 ]; then f $(($1-1)) & f $(($1-1)) & fi; "
    "sleep 60; }; f 7 > /dev/null 2>&1"
)
PROBE = """
import asyncio, json, sys
from pathlib import Path
from ouroboros.sandbox.reaper import group_left
from ouroboros.sandbox.orphans import Orphans
from ouroboros.sandbox.policy import Sandbox
from ouroboros.tools import ShellExec
workspace = Path(sys.argv[1])
sandbox = Sandbox.prepare("auto", workspace=workspace)
sandbox.orphans = Orphans.adopt()  # as a run without a cgroup: the killed come back to it
tool = ShellExec(workspace, timeout_secs=1, max_output_bytes=1000, blocked_patterns=[],
                 secret_env_names=[], on_security=print, sandbox=sandbox)
result = asyncio.run(tool.run({"command": sys.argv[2]}))
pgid = int((workspace / "sh.pid").read_text())
print(json.dumps({"content": result.content, "left": group_left(pgid, keep=pgid),
                  "pgid": pgid}))
"""
UNKILLABLE = """
import asyncio, sys
from ouroboros.tools.shell import kill_until_gone
print(asyncio.run(kill_until_gone(int(sys.argv[1]), wait_secs=0.3)))
"""


def bomb(process: subprocess.Popen[str]) -> dict:
    out, _ = process.communicate(timeout=KILL_WAIT_SECS + 60)
    assert process.returncode == 0, out
    found = json.loads(out)
    try:
        os.killpg(found["pgid"], signal.SIGKILL)  # whatever the harness left, for the next test
    except ProcessLookupError:
        pass
    return found


def check_reported_once_gone(found: dict) -> None:
    assert found["content"].endswith("[timed out after 1s; process group killed]"), found
    assert found["left"] == []


def test_a_timed_out_fork_bomb_is_reported_killed_once_its_group_is_gone(tmp_path: Path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    root = str(Path(__file__).resolve().parents[2])
    check_reported_once_gone(
        bomb(
            subprocess.Popen(
                [sys.executable, "-c", PROBE, str(workspace), BOMB],
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONPATH": root},
            )
        )
    )


def test_a_timed_out_fork_bomb_of_an_unprivileged_user_is_reported_killed_once_gone():
    shared, workspace = probe_workspace("")
    try:
        check_reported_once_gone(
            bomb(as_probe_user(PROBE, str(workspace), BOMB, stdout=subprocess.PIPE))
        )
    finally:
        subprocess.run(["rm", "-rf", str(shared)])


def test_a_group_that_cannot_be_killed_is_reported_with_what_is_left():
    """Another user's group: the unprivileged harness's SIGKILL cannot reach its member."""
    group = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    try:
        probe = as_probe_user(UNKILLABLE, str(group.pid), stdout=subprocess.PIPE)
        out, _ = probe.communicate(timeout=60)
    finally:
        os.killpg(group.pid, signal.SIGKILL)
        group.wait()
    assert out.strip() == "1", out


def test_the_status_line_says_what_was_left_of_a_killed_group():
    assert (
        status_line(Outcome(None, timed_out=True), 5)
        == "[timed out after 5s; process group killed]"
    )
    assert status_line(Outcome(None, timed_out=True, left=3), 5) == (
        f"[timed out after 5s; process group sent SIGKILL, but 3 of its processes were still "
        f"there {KILL_WAIT_SECS:g}s later]"
    )
