"""One harness per workspace, and per state dir: kernel locks naming their owner.

Two lock files, each held with `flock` for as long as the harness runs:

- the workspace's, `<locks dir>/<hash of the workspace's resolved path>.lock`, which every
  project pointing at that workspace finds, wherever its config and state dir are. The locks
  dir is `$XDG_CACHE_HOME/ouroboros/locks` (default `~/.cache/ouroboros/locks`), or
  `<temp dir>/ouroboros-<uid>/locks` when that cannot be made; never inside the workspace,
  where the agent could remove it;
- the state dir's, `<state_dir>/lock`, which `status`, `runs` and `reload` read to find the
  running harness.

The kernel releases a flock when its holder dies, however it dies, so a lock left by a dead
harness is free at once and taking it over is one atomic `flock` call: of any number of
processes racing for it, exactly one wins. Each file holds JSON naming its owner (pid, host,
run, workspace) for the error the others get.

    lock = WorkspaceLock.acquire(state_dir, workspace, run_id)
    ...
    lock.release()
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import socket
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ouroboros.errors import RunLockedError

LOCK_FILE = "lock"
# How long a process that lost the race waits for the winner to write its name in the file.
OWNER_WAIT_SECS = 0.5


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def locks_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where workspace locks live: `$XDG_CACHE_HOME/ouroboros/locks`, by default
    `~/.cache/ouroboros/locks`."""
    env = os.environ if env is None else env
    cache = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "ouroboros" / "locks"


def fallback_locks_dir() -> Path:
    """The locks dir when the cache dir cannot be made (a read-only home)."""
    return Path(tempfile.gettempdir()) / f"ouroboros-{os.getuid()}" / "locks"


def workspace_lock_name(workspace: Path) -> str:
    """The lock file's name for a workspace: a hash of its resolved path."""
    digest = hashlib.sha256(os.fsencode(workspace.resolve())).hexdigest()
    return f"{digest[:32]}.lock"


def workspace_lock_path(workspace: Path, env: Mapping[str, str] | None = None) -> Path:
    """The workspace's lock file, its directory made (mode 0700) if missing."""
    for directory in (locks_dir(env), fallback_locks_dir()):
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError:
            continue
        return directory / workspace_lock_name(workspace)
    raise RunLockedError(f"cannot make a directory for the workspace lock: tried "
                         f"{locks_dir(env)} and {fallback_locks_dir()}")


@dataclass
class HeldLock:
    """One lock file held with flock; `previous` is what a dead holder left in it."""

    path: Path
    fd: int
    previous: dict[str, Any] | None = None

    def release(self) -> None:
        if self.fd < 0:
            return
        try:
            if _same_file(self.fd, self.path):
                self.path.unlink(missing_ok=True)
        finally:
            os.close(self.fd)  # closing releases the flock
            self.fd = -1


def take(path: Path, owner: dict[str, Any], what: str) -> HeldLock:
    """Hold `path` with flock and write `owner` in it, or raise RunLockedError naming the
    process that holds it. `what` says what is locked, for the message."""
    for _ in range(10):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise
            raise RunLockedError(held_message(wait_for_owner(path), what)) from None
        if not _same_file(fd, path):  # its holder removed it as we opened it: open anew
            os.close(fd)
            continue
        previous = _read_fd(fd)
        if previous and previous.get("host") not in (None, owner["host"]):
            os.close(fd)  # a lock from another machine sharing this disk: not ours to judge
            raise RunLockedError(held_message(previous, what) + f", or delete {path} if you "
                                 "are sure it is gone")
        _write_fd(fd, owner)
        return HeldLock(path, fd, previous if previous and previous != owner else None)
    raise RunLockedError(f"could not take the lock {path}: another process keeps taking it")


def held_message(holder: dict[str, Any] | None, what: str) -> str:
    """The one line naming who holds a lock: "another Ouroboros (pid 42 on box, run R,
    state dir S) is using the workspace W; stop it first"."""
    if not holder:
        return f"another Ouroboros is using {what}; stop it first"
    other = "state_dir" if what.startswith("the workspace") else "workspace"
    where = f", {other.replace('_', ' ')} {holder[other]}" if holder.get(other) else ""
    return (f"another Ouroboros (pid {holder.get('pid')} on {holder.get('host')}, run "
            f"{holder.get('run_id')}{where}) is using {what}; stop it first")


def wait_for_owner(path: Path) -> dict[str, Any] | None:
    """The owner a lock file names, waiting briefly for a holder that has just taken it to
    write its name (until then the file is empty or names the dead holder before it)."""
    deadline = time.monotonic() + OWNER_WAIT_SECS
    while True:
        holder = read_holder(path)
        if holder and isinstance(holder.get("pid"), int) and holder_is_alive(holder):
            return holder
        if time.monotonic() >= deadline:
            return holder
        time.sleep(0.001)


@dataclass
class WorkspaceLock:
    """The workspace's lock and the state dir's, held together."""

    path: Path  # the state dir's lock file
    held: list[HeldLock] = field(default_factory=list)
    taken_over: dict | None = None  # the dead owner a lock was taken from, to report

    @classmethod
    def acquire(cls, state_dir: Path, workspace: Path, run_id: str,
                env: Mapping[str, str] | None = None) -> WorkspaceLock:
        """Take both locks (the workspace's first), or raise RunLockedError naming who holds
        one. A lock whose holder died is free, and taken over."""
        state_dir.mkdir(parents=True, exist_ok=True)
        resolved = workspace.resolve()
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "run_id": run_id,
                 "workspace": str(resolved), "state_dir": str(state_dir.resolve())}
        first = take(workspace_lock_path(resolved, env), owner, f"the workspace {resolved}")
        try:
            second = take(state_dir / LOCK_FILE, owner, f"the state dir {state_dir}")
        except BaseException:
            first.release()
            raise
        return cls(second.path, [first, second], second.previous or first.previous)

    def release(self) -> None:
        for held in reversed(self.held):
            held.release()
        self.held = []


def read_holder(path: Path) -> dict | None:
    try:
        holder = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


def holder_is_alive(holder: dict) -> bool:
    if holder.get("host") != socket.gethostname():
        return True  # cannot check another machine's processes: assume it is alive
    pid = holder.get("pid")
    return isinstance(pid, int) and pid_alive(pid)


def _same_file(fd: int, path: Path) -> bool:
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _read_fd(fd: int) -> dict[str, Any] | None:
    data = os.pread(fd, 65536, 0)
    try:
        holder = json.loads(data)
    except ValueError:
        return None
    return holder if isinstance(holder, dict) else None


def _write_fd(fd: int, owner: dict[str, Any]) -> None:
    data = json.dumps(owner).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
