"""One harness per workspace: the lock follows the workspace, not the project, and taking
over a dead holder's lock has exactly one winner however many race for it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ouroboros.errors import RunLockedError
from ouroboros.store.log import list_runs
from ouroboros.sandbox.lock import LOCK_FILE, WorkspaceLock, locks_dir, workspace_lock_path
from tests.crash_helpers import CountingAgent, demo_project, kill, wait_for
from tests.helpers import clean_env, make_project, ouroboros

ROUNDS = 1000
RACERS = 4


@pytest.fixture
def cache_env(tmp_path: Path) -> dict[str, str]:
    """Keeps the locks out of the real home."""
    return {"XDG_CACHE_HOME": str(tmp_path / "cache")}


def dead_pid() -> int:
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


def test_racing_takeovers_of_a_dead_holders_lock_have_exactly_one_winner(
    tmp_path: Path, cache_env: dict[str, str]
) -> None:
    workspace, state_dir = tmp_path / "ws", tmp_path / "state"
    workspace.mkdir()
    state_dir.mkdir()
    stale = ('{"pid": %d, "host": "%s", "run_id": "dead"}'
             % (dead_pid(), os.uname().nodename)).encode()
    lock_files = [workspace_lock_path(workspace, cache_env), state_dir / LOCK_FILE]
    start = threading.Barrier(RACERS + 1, timeout=10)
    done = threading.Barrier(RACERS + 1, timeout=10)
    outcomes: list[list[str]] = [[] for _ in range(ROUNDS)]

    def racer() -> None:
        for round_ in range(ROUNDS):
            start.wait()
            try:
                lock = WorkspaceLock.acquire(state_dir, workspace, f"r{round_}", env=cache_env)
            except RunLockedError:
                outcomes[round_].append("refused")
                done.wait()
            else:
                outcomes[round_].append("won")
                done.wait()  # every racer has tried before the winner lets go
                lock.release()

    threads = [threading.Thread(target=racer, daemon=True) for _ in range(RACERS)]
    switching = sys.getswitchinterval()
    sys.setswitchinterval(0.0002)  # the racers' system calls interleave more finely
    try:
        for thread in threads:
            thread.start()
        for _ in range(ROUNDS):
            for path in lock_files:  # the lock a dead harness left behind
                path.write_bytes(stale)
            start.wait()
            done.wait()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switching)
    winners = [outcome.count("won") for outcome in outcomes]
    assert winners == [1] * ROUNDS


def test_two_projects_on_one_workspace_cannot_run_at_once(
    tmp_path: Path, scripted_server, cache_env: dict[str, str]
) -> None:
    agent = CountingAgent(3, hold_request_at=2)
    server = scripted_server(agent)
    config, _ = demo_project(tmp_path / "first", server.base_url, 3, max_turns=20)
    shared = tmp_path / "first" / "workspace"
    other = make_project(tmp_path / "second", server.base_url,
                         agent={"workspace": str(shared)})
    env = clean_env(**cache_env)
    with (tmp_path / "first.out").open("w") as out:
        first = subprocess.Popen([sys.executable, "-m", "ouroboros", "run", "--config",
                                  str(config), "--headless"], env=env, stdout=out,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_for(agent.request_held.is_set, "the first run to be working", first)
        second = ouroboros("run", "--config", str(other), "--headless", env=env)
        assert first.poll() is None
    finally:
        kill(first)
    assert second.returncode == 2, second.stdout + second.stderr
    assert second.stderr.splitlines() == [
        f"error: another Ouroboros (pid {first.pid} on {os.uname().nodename}, run "
        f"{list_runs(tmp_path / 'first' / '.ouroboros')[0]}, state dir "
        f"{(tmp_path / 'first' / '.ouroboros').resolve()}) is using the workspace "
        f"{shared.resolve()}; stop it first"]
    assert list_runs(tmp_path / "second" / ".ouroboros") == []


HOLDER = """
import sys, time
from pathlib import Path
from ouroboros.sandbox.lock import WorkspaceLock
WorkspaceLock.acquire(Path(sys.argv[1]), Path(sys.argv[2]), "held", env={"XDG_CACHE_HOME": sys.argv[3]})
print("held", flush=True)
time.sleep(60)
"""


def test_the_lock_of_a_killed_harness_is_free_at_once(
    tmp_path: Path, cache_env: dict[str, str]
) -> None:
    workspace, state_dir = tmp_path / "ws", tmp_path / "state"
    workspace.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(state_dir), str(workspace),
         cache_env["XDG_CACHE_HOME"]], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(RunLockedError, match=f"pid {holder.pid} "):
            WorkspaceLock.acquire(tmp_path / "other-state", workspace, "second", env=cache_env)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        lock = WorkspaceLock.acquire(tmp_path / "other-state", workspace, "second", env=cache_env)
    finally:
        holder.kill()
        holder.wait()
    assert lock.taken_over is not None and lock.taken_over["pid"] == holder.pid
    lock.release()
    assert not (tmp_path / "other-state" / LOCK_FILE).exists()
    assert os.listdir(locks_dir(cache_env)) == []


def test_the_lock_is_keyed_by_the_workspaces_resolved_path_outside_it(
    tmp_path: Path, cache_env: dict[str, str]
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "alias").symlink_to(workspace, target_is_directory=True)
    path = workspace_lock_path(workspace, cache_env)
    assert path == workspace_lock_path(tmp_path / "alias", cache_env)
    assert path.parent == tmp_path / "cache" / "ouroboros" / "locks"
    assert path != workspace_lock_path(tmp_path, cache_env)
