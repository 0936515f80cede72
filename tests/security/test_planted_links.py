"""The harness's own files under attack: a symbolic link (or a FIFO, or a device) planted
where the harness keeps its lock, its workspace's owner file, its locks dir, its runs, its
inbox or its heartbeat, by another user or the agent. The file the link leads to is never
written, the harness never hangs or reads without end, and it says so in one line."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ouroboros.errors import ConfigError, RunLockedError
from ouroboros.loop.inbox import post, waiting
from ouroboros.sandbox.lock import WorkspaceLock, locks_dir, workspace_lock_name
from ouroboros.store.holder import LOCK_FILE
from ouroboros.store.log import runs_dir
from ouroboros.store.state_file import DamagedSnapshot, read_state
from tests.crash_helpers import CountingAgent, demo_project
from tests.helpers import clean_env
from tests.security.accounts import as_probe_user, probe_user, shared_dir
from tests.ui_sample import RUN_ID, write_sample_run

VICTIM_TEXT = "root's own: must never change\n"
MEMORY_CAP = 1 << 30  # a command that reads without end fails at this, not the machine


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file only its owner may read or write, which a planted link points at."""
    path = tmp_path / "victim"
    path.write_text(VICTIM_TEXT)
    path.chmod(0o600)
    return path


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A workspace, a state dir and a cache dir for the locks (as env), all made."""
    workspace, state_dir = tmp_path / "ws", tmp_path / "state"
    workspace.mkdir()
    state_dir.mkdir()
    return workspace, state_dir, {"XDG_CACHE_HOME": str(tmp_path / "cache")}


def capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def command(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`ouroboros ARGS` in its own process, its memory capped and its time bounded."""
    return subprocess.run(
        [sys.executable, "-m", "ouroboros", *args],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
        preexec_fn=capped,
    )


def sample_project(root: Path) -> Path:
    """A project whose one run was killed (no end record)."""
    (root / "ouroboros.toml").write_text("")
    write_sample_run(root / ".ouroboros", ended=False)
    return root / ".ouroboros"


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# -- the lock files -------------------------------------------------------------------------


def test_a_link_planted_at_the_state_dirs_lock_is_refused_and_its_target_kept(
    dirs: tuple[Path, Path, dict[str, str]], victim: Path
) -> None:
    workspace, state_dir, env = dirs
    (state_dir / LOCK_FILE).symlink_to(victim)
    with pytest.raises(
        RunLockedError,
        match=f"will not use the lock file {state_dir / LOCK_FILE}: it is a symbolic link",
    ):
        WorkspaceLock.acquire(state_dir, workspace, "r", env=env)
    assert victim.read_text() == VICTIM_TEXT
    WorkspaceLock.acquire(state_dir / "other", workspace, "r", env=env).release()  # let go


def test_a_link_planted_at_the_workspaces_owner_file_is_refused_and_its_target_kept(
    dirs: tuple[Path, Path, dict[str, str]], victim: Path
) -> None:
    workspace, state_dir, env = dirs
    directory = locks_dir(env)
    directory.mkdir(parents=True, mode=0o700)
    (directory / workspace_lock_name(workspace)).symlink_to(victim)
    with pytest.raises(RunLockedError, match="it is a symbolic link"):
        WorkspaceLock.acquire(state_dir, workspace, "r", env=env)
    assert victim.read_text() == VICTIM_TEXT


def test_a_hard_link_planted_at_the_lock_is_refused(
    dirs: tuple[Path, Path, dict[str, str]], victim: Path
) -> None:
    workspace, state_dir, env = dirs
    os.link(victim, state_dir / LOCK_FILE)
    with pytest.raises(RunLockedError, match="it has 2 hard links"):
        WorkspaceLock.acquire(state_dir, workspace, "r", env=env)
    assert victim.read_text() == VICTIM_TEXT


def test_a_fifo_at_the_lock_is_refused_without_waiting(
    dirs: tuple[Path, Path, dict[str, str]],
) -> None:
    workspace, state_dir, env = dirs
    os.mkfifo(state_dir / LOCK_FILE)
    with pytest.raises(RunLockedError, match="it is a FIFO; it should be a regular file"):
        WorkspaceLock.acquire(state_dir, workspace, "r", env=env)


def test_run_says_one_line_for_a_planted_lock_link(tmp_path: Path, victim: Path) -> None:
    project = tmp_path / "p"
    (project / "workspace").mkdir(parents=True)
    (project / "ouroboros.toml").write_text(
        '[model]\nbase_url = "http://127.0.0.1:1/v1"\nname = "m"\nmax_retry_secs = 1\n'
    )
    (project / "SYSTEM_PROMPT.md").write_text("mission")
    (project / ".ouroboros").mkdir()
    (project / ".ouroboros" / LOCK_FILE).symlink_to(victim)

    result = command("run", "--headless", cwd=project)

    assert result.returncode == 2
    assert one_line(result).startswith("error: will not use the lock file ")
    assert victim.read_text() == VICTIM_TEXT


@pytest.mark.parametrize("attack", ["writable", "link"])
def test_a_locks_dir_another_may_change_is_refused(
    dirs: tuple[Path, Path, dict[str, str]], tmp_path: Path, attack: str
) -> None:
    workspace, state_dir, env = dirs
    directory = locks_dir(env)
    directory.parent.mkdir(parents=True)
    if attack == "writable":
        directory.mkdir(mode=0o700)
        directory.chmod(0o777)
    else:
        (tmp_path / "elsewhere").mkdir()
        directory.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(RunLockedError, match=f"will not keep the workspace lock in {directory}"):
        WorkspaceLock.acquire(state_dir, workspace, "r", env=env)
    assert not list((tmp_path / "elsewhere").iterdir()) if attack == "link" else True


def test_a_fallback_locks_dir_planted_by_another_user_is_refused(
    dirs: tuple[Path, Path, dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uid, gid = probe_user()
    workspace, state_dir, _ = dirs
    temp = tmp_path / "tmp"
    temp.mkdir()
    temp.chmod(0o1777)  # as /tmp
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    planted = temp / f"ouroboros-{os.getuid()}"
    (planted / "locks").mkdir(parents=True)
    for path in (planted, planted / "locks"):
        os.chown(path, uid, gid)
    unusable = tmp_path / "read-only-cache"
    unusable.write_text("")  # the cache dir cannot be made: the fallback is tried
    with pytest.raises(RunLockedError, match=f"{planted}: it is owned by uid {uid}"):
        WorkspaceLock.acquire(state_dir, workspace, "r", env={"XDG_CACHE_HOME": str(unusable)})
    assert os.listdir(planted / "locks") == []


PLANT = """
import os, sys
os.symlink(sys.argv[2], sys.argv[1])
"""


def test_a_link_another_user_plants_in_a_shared_state_dir_leaves_roots_file_alone(
    tmp_path: Path, victim: Path
) -> None:
    probe_user()
    shared = shared_dir()
    try:
        workspace, state_dir = shared / "ws", shared / "state"
        workspace.mkdir()
        state_dir.mkdir()
        state_dir.chmod(0o777)
        planted = as_probe_user(PLANT, str(state_dir / LOCK_FILE), str(victim))
        assert planted.wait(timeout=60) == 0
        with pytest.raises(ConfigError, match="every user may write to it"):  # not used
            WorkspaceLock.acquire(
                state_dir, workspace, "r", env={"XDG_CACHE_HOME": str(tmp_path / "cache")}
            )
        assert victim.read_text() == VICTIM_TEXT
    finally:
        subprocess.run(["rm", "-rf", str(shared)])


PLANT_AND_TAKE = """
import os, sys
from pathlib import Path
from ouroboros.errors import RunLockedError
from ouroboros.sandbox.lock import WorkspaceLock
from ouroboros.store.state_file import DamagedSnapshot, read_state
state, workspace, cache, victim = map(Path, sys.argv[1:5])
state.mkdir()
(state / "lock").symlink_to(victim)
try:
    WorkspaceLock.acquire(state, workspace, "probe", env={"XDG_CACHE_HOME": str(cache)})
except RunLockedError as error:
    print("refused:", error)
else:
    print("taken")
"""


def test_an_unprivileged_harness_refuses_a_planted_lock_link_too() -> None:
    uid, gid = probe_user()
    shared = shared_dir()
    try:
        workspace, victim = shared / "ws", shared / "victim"
        workspace.mkdir()
        victim.write_text(VICTIM_TEXT)
        for path in (workspace, victim):
            os.chown(path, uid, gid)
        probe = as_probe_user(
            PLANT_AND_TAKE,
            str(shared / "state"),
            str(workspace),
            str(shared / "cache"),
            str(victim),
            stdout=subprocess.PIPE,
        )
        out, _ = probe.communicate(timeout=60)
        assert out.startswith("refused: will not use the lock file "), out
        assert victim.read_text() == VICTIM_TEXT
    finally:
        subprocess.run(["rm", "-rf", str(shared)])


# -- runs, inbox, heartbeat, manifest, snapshot ---------------------------------------------


def test_a_runs_dir_that_is_a_link_is_refused_in_one_line(tmp_path: Path) -> None:
    state_dir = sample_project(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    runs_dir(state_dir).rename(elsewhere)
    runs_dir(state_dir).symlink_to(elsewhere)

    result = command("status", cwd=tmp_path)

    assert result.returncode == 1
    assert one_line(result) == (
        f"error: {runs_dir(state_dir)} is a symbolic link; the harness "
        "keeps its runs in a directory of its own there and does not "
        "follow a link: remove it"
    )


def test_a_run_does_not_write_through_a_runs_link(tmp_path: Path, scripted_server) -> None:
    server = scripted_server(CountingAgent(2))
    project = tmp_path / "p"
    demo_project(project, server.base_url, 2, max_turns=5)
    (project / ".ouroboros").mkdir()
    victim_dir = tmp_path / "victim-dir"
    victim_dir.mkdir()
    (project / ".ouroboros" / "runs").symlink_to(victim_dir)

    result = command("run", "--headless", cwd=project)

    assert result.returncode == 1, result.stderr
    assert "is a symbolic link" in one_line(result)
    assert list(victim_dir.iterdir()) == []


def test_tell_does_not_write_through_an_inbox_link(tmp_path: Path) -> None:
    state_dir = sample_project(tmp_path)
    victim_dir = tmp_path / "victim-dir"
    victim_dir.mkdir()
    (state_dir / "inbox").symlink_to(victim_dir)

    result = command("tell", "hello", cwd=tmp_path)

    assert result.returncode == 1
    assert one_line(result) == (
        f"error: cannot use {state_dir / 'inbox'}: it is a symbolic "
        "link; the harness keeps a directory of its own there: "
        "remove it"
    )
    assert list(victim_dir.iterdir()) == []


def test_letters_behind_an_inbox_link_are_not_taken(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    post(elsewhere, "planted")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "inbox").symlink_to(elsewhere / "inbox")
    assert waiting(tmp_path / "state") == []


@pytest.mark.parametrize("planted", ["fifo", "zero"])
def test_status_json_neither_hangs_nor_reads_without_end_on_a_strange_heartbeat(
    tmp_path: Path, planted: str
) -> None:
    state_dir = sample_project(tmp_path)
    if planted == "fifo":
        os.mkfifo(state_dir / "heartbeat")
    else:
        (state_dir / "heartbeat").symlink_to("/dev/zero")

    result = command("status", "--json", cwd=tmp_path)

    assert result.returncode == 3, result.stderr
    health = json.loads(result.stdout)
    assert health["state"] == "stopped" and health["heartbeat_age_secs"] is None


def test_a_linked_manifest_is_not_read_through(tmp_path: Path) -> None:
    state_dir = sample_project(tmp_path)
    manifest = runs_dir(state_dir) / RUN_ID / "manifest.json"
    if manifest.exists():
        manifest.unlink()
    manifest.symlink_to("/dev/zero")

    result = command("status", "--json", cwd=tmp_path)

    assert result.returncode == 3, result.stderr
    assert json.loads(result.stdout)["run_id"] == RUN_ID


def test_a_linked_snapshot_is_damaged_not_read_through(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (tmp_path / "elsewhere.json").write_text(
        json.dumps({"format_version": 3, "seq": 1, "state": {"planted": True}})
    )
    (run_dir / "state.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(DamagedSnapshot, match="it is a symbolic link"):
        read_state(run_dir)


def test_tell_reads_no_more_of_a_file_than_a_message_may_hold(tmp_path: Path) -> None:
    sample_project(tmp_path)

    result = command("tell", "--file", "/dev/zero", cwd=tmp_path)

    assert result.returncode == 2
    assert one_line(result) == (
        "error: the message in /dev/zero is over 65,536 bytes, the most "
        "that may be sent (put the rest in a workspace file and tell "
        "the agent to read it)"
    )


def test_a_fifo_planted_as_the_state_dirs_project_file_hangs_no_command(tmp_path: Path) -> None:
    state_dir = sample_project(tmp_path)
    (tmp_path / "ouroboros.toml").write_text(
        '[model]\nbase_url = "http://127.0.0.1:1"\nwait_for_server_secs = 0\n'
    )
    (tmp_path / "SYSTEM_PROMPT.md").write_text("mission")
    (tmp_path / "workspace").mkdir()
    os.mkfifo(state_dir / "project.json")

    result = command("resume", "--headless", cwd=tmp_path)  # returns: it does not wait

    assert one_line(result).startswith("error: cannot reach the model server")


def test_the_event_log_is_not_appended_through_a_link(tmp_path: Path, victim: Path) -> None:
    from ouroboros.errors import StateError
    from ouroboros.store.log import EventLog

    run_dir = tmp_path / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    (run_dir / "events.jsonl").symlink_to(victim)
    with pytest.raises(StateError, match=f"cannot write {run_dir / 'events.jsonl'}"):
        EventLog(run_dir / "events.jsonl")
    assert victim.read_text() == VICTIM_TEXT


def test_recall_does_not_read_a_pack_through_a_link(tmp_path: Path) -> None:
    from ouroboros.store.observations import read_from_pack

    elsewhere = tmp_path / "elsewhere.pack"
    elsewhere.write_bytes(b"obs-1 6\nsecret\n")
    (tmp_path / "s000001-000000001.pack").symlink_to(elsewhere)
    assert read_from_pack(elsewhere, "obs-1") == "secret"  # a pack, read as itself
    assert read_from_pack(tmp_path / "s000001-000000001.pack", "obs-1") is None


def project_with_state_dir(tmp_path: Path) -> Path:
    project = tmp_path / "p"
    (project / "workspace").mkdir(parents=True)
    (project / "ouroboros.toml").write_text(
        '[model]\nbase_url = "http://127.0.0.1:1/v1"\nname = "m"\nwait_for_server_secs = 0\n'
    )
    (project / "SYSTEM_PROMPT.md").write_text("mission")
    return project


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_state_dir_another_user_owns_is_refused_in_one_line(tmp_path: Path) -> None:
    project = project_with_state_dir(tmp_path)
    state_dir = project / ".ouroboros"
    state_dir.mkdir()
    os.chown(state_dir, 65534, 65534)

    result = command("run", "--headless", cwd=project)

    assert result.returncode == 2, result.stderr
    assert one_line(result).startswith(
        f"error: will not keep the run in the state dir {state_dir}: it is owned by uid 65534"
    )
    assert "logging.state_dir" in one_line(result)
    assert list(state_dir.iterdir()) == []  # nothing written there


def test_a_state_dir_every_user_may_write_is_refused_and_one_made_is_private(
    tmp_path: Path,
) -> None:
    project = project_with_state_dir(tmp_path)
    state_dir = project / ".ouroboros"
    state_dir.mkdir()
    state_dir.chmod(0o777)

    refused = command("run", "--headless", cwd=project)

    assert refused.returncode == 2 and "every user may write to it" in one_line(refused)
    state_dir.rmdir()
    made = command("run", "--headless", cwd=project)  # on to the unreachable server
    assert "cannot reach the model server" in one_line(made)
    assert oct(state_dir.stat().st_mode & 0o777) == oct(0o700)
