"""One harness per workspace: the lock follows the workspace, not the project, and taking
over a dead holder's lock has exactly one winner however many race for it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ouroboros.errors import RunLockedError
from ouroboros.sandbox.lock import WorkspaceLock, locks_dir, workspace_lock_path
from ouroboros.sandbox.reaper import Watchdog, workspace_tag
from ouroboros.store.holder import LOCK_FILE, flocks_span_hosts, holder_is_alive, mount_of
from ouroboros.store.log import list_runs
from tests.crash_helpers import CountingAgent, demo_project, kill, wait_for
from tests.helpers import clean_env, make_project, ouroboros
from tests.security.accounts import as_probe_user, shared_dir

ROUNDS = 1000
RACERS = 4


@pytest.fixture
def cache_env(tmp_path: Path) -> dict[str, str]:
    """Keeps the locks out of the real home."""
    return {"XDG_CACHE_HOME": str(tmp_path / "cache")}


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace and a state dir, both made."""
    workspace, state_dir = tmp_path / "ws", tmp_path / "state"
    workspace.mkdir()
    state_dir.mkdir()
    return workspace, state_dir


def dead_pid() -> int:
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


def test_racing_takeovers_of_a_dead_holders_lock_have_exactly_one_winner(
    dirs: tuple[Path, Path], cache_env: dict[str, str]
) -> None:
    workspace, state_dir = dirs
    stale = (
        '{"pid": %d, "host": "%s", "run_id": "dead"}' % (dead_pid(), os.uname().nodename)
    ).encode()
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
    other = make_project(tmp_path / "second", server.base_url, agent={"workspace": str(shared)})
    env = clean_env(**cache_env)
    with (tmp_path / "first.out").open("w") as out:
        first = subprocess.Popen(
            [sys.executable, "-m", "ouroboros", "run", "--config", str(config), "--headless"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
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
        f"{shared.resolve()}; stop it first"
    ]
    assert list_runs(tmp_path / "second" / ".ouroboros") == []


HOLDER = """
import sys, time
from pathlib import Path
from ouroboros.sandbox.lock import WorkspaceLock
WorkspaceLock.acquire(Path(sys.argv[1]), Path(sys.argv[2]), "held",
                      env={"XDG_CACHE_HOME": sys.argv[3]})
print("held", flush=True)
time.sleep(60)
"""


def hold(state_dir: Path, workspace: Path, cache: Path) -> subprocess.Popen[str]:
    """A process holding the workspace's lock (reached by `workspace`) until killed."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(state_dir), str(workspace), str(cache)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def stop(holder: subprocess.Popen[str]) -> None:
    holder.kill()
    holder.wait()


def test_the_lock_of_a_killed_harness_is_free_at_once(
    tmp_path: Path, cache_env: dict[str, str]
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    holder = hold(tmp_path / "state", workspace, Path(cache_env["XDG_CACHE_HOME"]))
    try:
        with pytest.raises(RunLockedError, match=f"pid {holder.pid} "):
            WorkspaceLock.acquire(tmp_path / "other-state", workspace, "second", env=cache_env)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        lock = WorkspaceLock.acquire(tmp_path / "other-state", workspace, "second", env=cache_env)
    finally:
        stop(holder)
    assert lock.taken_over is not None and lock.taken_over["pid"] == holder.pid
    lock.release()
    assert not (tmp_path / "other-state" / LOCK_FILE).exists()
    assert os.listdir(locks_dir(cache_env)) == []


def test_the_lock_is_keyed_by_the_workspaces_identity_outside_it(
    tmp_path: Path, cache_env: dict[str, str]
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "alias").symlink_to(workspace, target_is_directory=True)
    path = workspace_lock_path(workspace, cache_env)
    assert path == workspace_lock_path(tmp_path / "alias", cache_env)
    assert path.parent == tmp_path / "cache" / "ouroboros" / "locks"
    assert path != workspace_lock_path(tmp_path, cache_env)


def test_a_symlink_and_another_cache_dir_meet_the_same_lock(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "alias").symlink_to(workspace, target_is_directory=True)
    holder = hold(tmp_path / "state", workspace, tmp_path / "cache-one")
    try:
        with pytest.raises(RunLockedError, match="is using the workspace"):
            WorkspaceLock.acquire(
                tmp_path / "state-two",
                tmp_path / "alias",
                "second",
                env={"XDG_CACHE_HOME": str(tmp_path / "cache-two")},
            )
    finally:
        stop(holder)


def test_a_bind_mount_of_the_workspace_meets_the_same_lock(tmp_path: Path) -> None:
    workspace, mounted = tmp_path / "ws", tmp_path / "mounted"
    workspace.mkdir()
    mounted.mkdir()
    bound = subprocess.run(
        ["mount", "--bind", str(workspace), str(mounted)], capture_output=True, text=True
    )
    if bound.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {bound.stderr.strip()}")
    holder = hold(tmp_path / "state", workspace, tmp_path / "cache-one")
    try:
        with pytest.raises(RunLockedError, match="is using the workspace"):
            WorkspaceLock.acquire(
                tmp_path / "state-two",
                mounted,
                "second",
                env={"XDG_CACHE_HOME": str(tmp_path / "cache-two")},
            )
    finally:
        stop(holder)
        subprocess.run(["umount", str(mounted)], check=True)


TRY_LOCK = """
import sys
from pathlib import Path
from ouroboros.errors import RunLockedError
from ouroboros.sandbox.lock import WorkspaceLock
try:
    WorkspaceLock.acquire(Path(sys.argv[1]), Path(sys.argv[2]), "probe",
                          env={"XDG_CACHE_HOME": sys.argv[3]})
except RunLockedError as error:
    print("refused:", error)
else:
    print("taken")
"""


def test_another_user_meets_the_same_lock(tmp_path: Path) -> None:
    shared = shared_dir()
    workspace = shared / "ws"
    workspace.mkdir()
    workspace.chmod(0o777)
    holder = hold(tmp_path / "state", workspace, tmp_path / "cache")
    try:
        probe = as_probe_user(
            TRY_LOCK,
            str(shared / "probe-state"),
            str(workspace),
            str(shared / "probe-cache"),
            stdout=subprocess.PIPE,
        )
        out, _ = probe.communicate(timeout=60)
    finally:
        stop(holder)
        subprocess.run(["rm", "-rf", str(shared)])
    assert out.startswith("refused: another Ouroboros"), out
    assert "is using the workspace" in out


def test_a_dead_holder_on_another_host_is_taken_over_saying_what_is_known(
    dirs: tuple[Path, Path], cache_env: dict[str, str]
) -> None:
    workspace, state_dir = dirs
    (state_dir / LOCK_FILE).write_text(
        '{"pid": 4242, "host": "node-7", "run_id": "20250101-000000-gone", '
        '"since": "2025-01-01T00:00:00Z"}'
    )
    lock = WorkspaceLock.acquire(state_dir, workspace, "here", env=cache_env)
    try:
        note = lock.takeover_note()
    finally:
        lock.release()
    assert note == (
        "took over a stale lock left by pid 4242 (on node-7, run "
        "20250101-000000-gone, holding it since 2025-01-01T00:00:00Z): that "
        "process no longer holds the kernel lock, so it is gone"
    )


MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
40 22 0:35 / /srv/share rw,relatime - nfs4 server:/export rw,vers=4.2
41 22 0:36 / /srv/lonely rw - nfs server:/x rw,nolock
42 22 0:37 / /mnt/smb rw - cifs //host/share rw
43 22 0:38 / /mnt/ssh rw,nosuid - fuse.sshfs me@host: rw
"""


@pytest.mark.parametrize(
    ("path", "spans"),
    [
        ("/home/me/ws", True),
        ("/srv/share/ws", True),
        ("/srv/lonely/ws", False),
        ("/mnt/smb/ws", False),
        ("/mnt/ssh/ws", False),
        ("/srv/shared", True),
    ],
)
def test_only_filesystems_sharing_flocks_between_hosts_take_over_another_hosts_lock(
    path: str, spans: bool
) -> None:
    assert flocks_span_hosts(*mount_of(Path(path), MOUNTINFO)) is spans


def test_the_watchdog_holds_the_workspace_until_it_has_ended_the_tools(
    tmp_path: Path, cache_env: dict[str, str]
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    lock = WorkspaceLock.acquire(tmp_path / "state", workspace, "first", env=cache_env)
    watchdog = Watchdog.start(workspace_tag(workspace), lock.kernel_fds)
    lock.release()  # as a harness killed before its watchdog has reaped
    other = {"XDG_CACHE_HOME": str(tmp_path / "other-cache")}
    with pytest.raises(RunLockedError):
        WorkspaceLock.acquire(tmp_path / "state-two", workspace, "second", env=other)
    watchdog.stop()
    WorkspaceLock.acquire(tmp_path / "state-two", workspace, "second", env=other).release()


def test_a_holder_on_another_host_is_alive_only_while_the_kernel_lock_is_held(
    tmp_path: Path, dirs: tuple[Path, Path]
) -> None:
    workspace, state_dir = dirs
    elsewhere = {"pid": 4242, "host": "node-7", "run_id": "r"}
    (state_dir / LOCK_FILE).write_text(json.dumps(elsewhere))
    assert not holder_is_alive(elsewhere, state_dir / LOCK_FILE)
    holder = hold(state_dir, workspace, tmp_path / "cache")
    try:
        assert holder_is_alive(elsewhere, state_dir / LOCK_FILE)
    finally:
        stop(holder)
