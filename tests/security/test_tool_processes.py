"""Tool processes die with the harness: a real `ouroboros run` is `kill -9`ed while a command
with a background job runs; the job never writes. With the watchdog gone too, the resume kills
the leftovers before the run goes on.

The harness runs in a process of its own forked from the test's (tests.helpers.ouroboros_forked:
the real entry point, its own pid, children, cgroup moves and `kill -9`, without an interpreter
to start); as another user, it is a whole new process (tests.security.accounts)."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from ouroboros.sandbox.cgroup import ToolCgroup
from ouroboros.sandbox.orphans import own_children
from ouroboros.sandbox.reaper import Process, kill_exactly, temp_prefix, victims, workspace_tag
from ouroboros.testing import Reply
from tests.crash_helpers import kill, start_forked, wait_for
from tests.helpers import (
    clean_env,
    make_project,
    of_type,
    ouroboros_child,
    ouroboros_forked,
    run_events,
    running,
)

# The job writes only once the test lets it go (a file named `go`), so a busy machine cannot
# make it write before the harness had its chance to kill it.
HELD = (
    "(while [ ! -e go ]; do sleep 0.05; done; echo late >> late.txt) > /dev/null 2>&1 & "
    "echo $! > bg.pid; echo $$ > sh.pid; sleep 30"
)
DYING_SECS = 5  # for a process sent SIGKILL to leave; well below HELD's `sleep 30`


def let_go_and_check_silence(workspace: Path) -> bool:
    """Release the held job and check that nothing is left to write it: no process runs in
    the workspace (found by its working directory, not as the harness finds its tools). Call
    it once the killing is done: what was killed has only to leave (DYING_SECS), while a
    survivor, let go, writes late.txt and ends, or sleeps on past them."""
    (workspace / "go").touch()
    wait_for(
        lambda: not in_workspace(workspace),
        f"the processes left in the workspace ({in_workspace(workspace)}) to end",
        timeout=DYING_SECS,
    )
    return not (workspace / "late.txt").exists()


def in_workspace(workspace: Path) -> list[int]:
    """The running processes whose working directory is `workspace` (the same directory,
    whatever mount namespace they see it through)."""
    target = workspace.stat()
    found = []
    for cwd in Path("/proc").glob("[0-9]*/cwd"):
        try:
            seen = os.stat(cwd)
        except OSError:  # gone, or not ours to look at
            continue
        pid = int(cwd.parent.name)
        if (seen.st_dev, seen.st_ino) == (target.st_dev, target.st_ino) and running(pid):
            found.append(pid)
    return found


def holder(messages: list[dict]) -> Reply:
    """The scripted model: the held command first, then done (after a resume too)."""
    if not any(m["role"] == "tool" for m in messages):
        return Reply("start a background job", [("shell_exec", {"command": HELD})])
    return Reply("done")


def wait_gone(pids: list[int], what: str) -> None:
    """Wait for every one of `pids` to end (crash_helpers.wait_for: it fails within the test's
    timeout, naming what it waited for)."""
    wait_for(lambda: not any(map(running, pids)), f"{what} {pids} to end")


def private_temp_dirs(workspace: Path) -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob(temp_prefix(workspace_tag(workspace)) + "*"))


def killed_mid_command(
    tmp_path: Path, server, *, watchdog_too: bool = False
) -> tuple[Path, list[int]]:
    """A run killed with SIGKILL while HELD runs (its watchdog first, if `watchdog_too`):
    the config and the command's pids."""
    config = make_project(tmp_path, server.base_url, agent={"max_turns": 2})
    workspace = tmp_path / "workspace"
    harness = start_forked("run", "--config", str(config), "--headless", root=tmp_path)
    try:
        # whole lines, not just the files: the pids are written once their processes run
        wait_for(
            lambda: all(
                path.is_file() and path.read_text().endswith("\n")
                for path in (workspace / "sh.pid", workspace / "bg.pid")
            ),
            "the held command",
            harness,
        )
        watchdog = [
            p
            for p in own_children(of=harness.pid)
            if b"ouroboros.sandbox.reaper" in Path(f"/proc/{p}/cmdline").read_bytes()
        ]
        assert len(watchdog) == 1, "no watchdog was started with the run"
        if watchdog_too:
            os.kill(watchdog[0], signal.SIGKILL)
    finally:
        kill(harness)
    pids = [int((workspace / name).read_text()) for name in ("sh.pid", "bg.pid")]
    return config, pids


def test_a_killed_harness_leaves_no_tool_process(tmp_path, scripted_server):
    server = scripted_server(holder)
    config, pids = killed_mid_command(tmp_path, server)

    wait_gone(pids, "the held command's processes")
    # the watchdog removes it once it has killed them all: its work is done
    wait_for(
        lambda: not private_temp_dirs(tmp_path / "workspace"),
        "the watchdog to remove the run's private temp dir",
    )
    assert let_go_and_check_silence(tmp_path / "workspace")


def test_a_background_job_ends_with_the_run(tmp_path, scripted_server):
    server = scripted_server(
        [
            Reply(
                "serve",
                [("shell_exec", {"command": "sleep 30 > /dev/null 2>&1 & echo $! > bg.pid"})],
            ),
            Reply("done"),
        ]
    )
    config = make_project(tmp_path, server.base_url)

    result = ouroboros_child("run", "--config", str(config), "--headless", "--max-turns", "2")

    assert result.returncode == 3, result.stderr
    assert not running(int((tmp_path / "workspace" / "bg.pid").read_text()))
    assert not private_temp_dirs(tmp_path / "workspace")


def test_resume_kills_leftovers_before_answering_the_interrupted_call(tmp_path, scripted_server):
    server = scripted_server(holder)
    config, pids = killed_mid_command(tmp_path, server, watchdog_too=True)
    assert all(map(running, pids))  # with the watchdog gone, nothing reaped them

    result = ouroboros_child("resume", "--config", str(config), "--headless")

    assert result.returncode == 3, result.stderr
    assert not any(map(running, pids))
    assert let_go_and_check_silence(tmp_path / "workspace")
    events = run_events(tmp_path)
    resumed = next(i for i, e in enumerate(events) if e["type"] == "run_resumed")
    interrupted = next(i for i, e in enumerate(events) if e.get("interrupted"))
    warning = next(
        i
        for i, e in enumerate(events)
        if e["type"] == "warning" and "left running in this workspace" in e["message"]
    )
    assert resumed < warning < interrupted
    listed = events[warning]["message"].split("(pid ")[1].rstrip(")").split(", ")
    assert {str(pid) for pid in pids} <= set(listed)
    assert not private_temp_dirs(tmp_path / "workspace")  # the killed run's, and the resume's
    assert of_type(events, "run_end")[-1]["reason"] in ("max_turns", "task_complete")


def test_only_marked_processes_and_their_sessions_are_taken() -> None:
    processes = [
        Process(10, 10, True),  # a tool's shell, leading its session
        Process(11, 10, False),  # its child that cleared its environment
        Process(20, 20, False),  # someone else's session leader
        Process(21, 20, True),  # a marked process inside it: only itself
        Process(30, 5, True),  # marked, in our own session
        Process(31, 5, False),  # us, or a sibling: never
        Process(40, 0, True),  # session 0
        Process(41, 0, False),
    ]
    assert victims(processes, own_sessions={5}) == [10, 11, 21, 30, 40]


def test_descendants_of_a_tool_are_taken_even_in_a_session_and_environment_of_their_own() -> None:
    processes = [
        Process(10, 10, True, parent=5),  # a tool's shell
        Process(12, 12, False, parent=10),  # setsid env -i: its own session, no marker
        Process(13, 12, False, parent=12),  # and its child
        Process(20, 20, False, parent=1),  # someone else's
    ]
    assert victims(processes, own_sessions={5}) == [10, 12, 13]


def test_a_pid_that_names_another_process_since_the_scan_is_not_killed() -> None:
    other = subprocess.Popen(["sleep", "30"])
    try:
        stat = Path(f"/proc/{other.pid}/stat").read_text().rsplit(")", 1)[1].split()
        kill_exactly(Process(other.pid, 0, True, start=int(stat[19]) + 1))  # a recycled pid
        assert other.poll() is None
        kill_exactly(Process(other.pid, 0, True, start=int(stat[19])))
        assert other.wait(timeout=10) == -signal.SIGKILL
    finally:
        other.kill()
        other.wait()


ESCAPE = (
    "setsid env -i /bin/sh -c 'echo $$ > escaped.pid; exec sleep 60' "
    "> /dev/null 2>&1 < /dev/null & while [ ! -s escaped.pid ]; do sleep 0.05; done; "
    "echo started"
)


def test_a_job_that_leaves_the_session_and_clears_its_environment_ends_with_the_run(
    tmp_path, scripted_server
) -> None:
    cgroup = ToolCgroup.of("probe-" + str(os.getpid()))
    if cgroup is None or cgroup.create() is None:
        pytest.skip(
            "cgroup v2 is not writable here: an orphan out of session and marker escapes the scan"
        )
    cgroup.kill()
    server = scripted_server(
        [Reply("escape", [("shell_exec", {"command": ESCAPE})]), Reply("done")]
    )
    config = make_project(tmp_path, server.base_url)

    result = ouroboros_child("run", "--config", str(config), "--headless", "--max-turns", "2")

    assert result.returncode == 3, result.stderr  # paused at its max_turns
    escaped = int((tmp_path / "workspace" / "escaped.pid").read_text())
    alive = running(escaped)
    if alive:
        os.kill(escaped, signal.SIGKILL)
    assert not alive


def test_without_a_cgroup_the_harness_adopts_the_orphan_that_left_session_and_marker(
    tmp_path, scripted_server
) -> None:
    # its own session, not a tool's; not the test's child (which a run forked from the test
    # would refuse: tests.helpers.no_foreign_children)
    unrelated = int(
        subprocess.run(
            ["sh", "-c", "setsid sleep 60 < /dev/null > /dev/null 2>&1 & echo $!"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    server = scripted_server(
        [Reply("escape", [("shell_exec", {"command": ESCAPE})]), Reply("done")]
    )
    config = make_project(tmp_path, server.base_url)
    try:
        result = ouroboros_child(
            "run",
            "--config",
            str(config),
            "--headless",
            "--max-turns",
            "2",
            env=clean_env(OUROBOROS_NO_CGROUP="1"),
        )
        assert result.returncode == 3, result.stderr  # paused at its max_turns
        escaped = int((tmp_path / "workspace" / "escaped.pid").read_text())
        alive = running(escaped)
        if alive:
            os.kill(escaped, signal.SIGKILL)
        assert not alive, "the setsid env -i orphan outlived the run"
        assert running(unrelated), "an unrelated process was killed"
    finally:
        if running(unrelated):
            os.kill(unrelated, signal.SIGKILL)


def test_adopted_orphans_are_reaped_as_they_exit_and_killed_at_the_end(tmp_path) -> None:
    from ouroboros.sandbox.orphans import Orphans

    own = subprocess.Popen(["sleep", "60"], start_new_session=True)  # started by us: kept
    orphans = Orphans.adopt()
    if orphans is None:
        pytest.skip("PR_SET_CHILD_SUBREAPER is refused here")
    try:
        orphans.started(own)
        for _ in range(3):  # each leaves an orphan that soon exits: no zombie may stay
            subprocess.run(["setsid", "sh", "-c", "sleep 0.1 &"], check=True)
        subprocess.run(["setsid", "sh", "-c", f"sleep 60 & echo $! > {tmp_path}/bg"], check=True)
        orphan = int((tmp_path / "bg").read_text())
        assert orphan in own_children()  # it came back to us, not to init
        wait_for(
            lambda: sorted(alive for _, alive in orphans.adopted()) == [False, False, False, True],
            "three zombies and one running orphan",
        )
        orphans.reap_exited()
        assert [pid for pid, _ in orphans.adopted()] == [orphan]
        killed = orphans.kill_all()
        assert killed == [orphan] and not running(orphan)
        assert own.poll() is None
    finally:
        orphans.release()
        own.kill()
        own.wait()


def test_an_unprivileged_harness_without_a_cgroup_leaves_no_orphan(scripted_server) -> None:
    from tests.security.accounts import harness_as_probe_user, shared_dir

    server = scripted_server(
        [Reply("escape", [("shell_exec", {"command": ESCAPE})]), Reply("done")]
    )
    project = shared_dir() / "project"
    try:
        config = make_project(project, server.base_url)
        result = harness_as_probe_user(
            project, "run", "--config", str(config), "--headless", "--max-turns", "2"
        )
        assert result.returncode == 3, result.stderr
        escaped = int((project / "workspace" / "escaped.pid").read_text())
        alive = running(escaped)
        if alive:
            os.kill(escaped, signal.SIGKILL)
        assert not alive, "the setsid env -i orphan outlived the run"
    finally:
        subprocess.run(["rm", "-rf", str(project.parent)])


def test_without_a_cgroup_a_killed_harness_leaves_no_adopted_orphan(
    tmp_path, scripted_server
) -> None:
    def brain(messages: list[dict]) -> Reply:
        calls = sum(m["role"] == "tool" for m in messages)
        if calls == 0:
            return Reply("escape", [("shell_exec", {"command": ESCAPE})])
        return Reply("wait", [("shell_exec", {"command": "echo $$ > sh.pid; sleep 30"})])

    server = scripted_server(brain)
    config = make_project(tmp_path, server.base_url, agent={"max_turns": 3})
    workspace = tmp_path / "workspace"
    harness = ouroboros_forked(
        "run",
        "--config",
        str(config),
        "--headless",
        out=tmp_path / "out.txt",
        err=tmp_path / "err.txt",
        env=clean_env(OUROBOROS_NO_CGROUP="1"),
    )
    try:
        wait_for(lambda: (workspace / "sh.pid").exists(), "the second command", harness)
        escaped = int((workspace / "escaped.pid").read_text())
        assert running(escaped)
    finally:
        kill(harness)
    try:
        wait_gone([escaped], "the orphan the harness had adopted (killed by its watchdog)")
    finally:
        if running(escaped):
            os.kill(escaped, signal.SIGKILL)


def test_a_watchdog_that_will_not_stop_is_killed_and_reaped() -> None:
    from ouroboros.sandbox.reaper import Watchdog

    stuck = subprocess.Popen(["sleep", "60"], stdin=subprocess.PIPE)  # ignores its stdin
    watchdog = Watchdog(stuck)

    watchdog.stop(timeout=0.01)

    assert stuck.returncode == -signal.SIGKILL  # waited for: no zombie left behind
    assert stuck.pid not in own_children()
