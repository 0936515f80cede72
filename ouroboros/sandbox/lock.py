"""One harness per workspace, and per state dir: kernel locks naming their owner.

Held with `flock` for as long as the harness runs (and by its watchdog until the workspace's
tool processes are gone, so no other harness starts tools beside them):

- the workspace directory itself: every path to it (a symlink, a bind mount) and every user,
  cache dir or container meets the same kernel lock, which lives with the directory's inode;
- the workspace's owner file, `<locks dir>/<device and inode of the workspace>.lock`, naming
  the holder (pid, host, run, state dir) for the error the others get. The locks dir is
  `$XDG_CACHE_HOME/ouroboros/locks` (default `~/.cache/ouroboros/locks`), or
  `<temp dir>/ouroboros-<uid>/locks` when that cannot be made; never inside the workspace,
  where the agent could remove it;
- the state dir's, `<state_dir>/lock`, which `status`, `runs` and `reload` read to find the
  running harness (store/holder.py: who holds a lock file, read without taking it).

The kernel releases a flock when its holder dies, however it dies, so a lock left by a dead
harness is free at once and taking it over is one atomic `flock` call: of any number of
processes racing for it, exactly one wins. A holder named on another host is no reason to
refuse where the filesystem shares flocks between hosts (local disks, NFS with its lock
manager): holding the kernel lock proves that holder gone. Where flocks stay on one host
(SMB, 9p, FUSE, NFS with `nolock`), another host's holder is refused as before.

    lock = WorkspaceLock.acquire(state_dir, workspace, run_id)
    ...
    lock.release()
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import socket
import stat
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ouroboros.errors import ConfigError, RunLockedError
from ouroboros.store.files import Refused, make_private_dir, open_regular
from ouroboros.store.holder import (
    LOCK_FILE,
    holder_is_alive,
    kernel_lock_spans_hosts,
    live_holder,
    read_holder,
)

# How long a process that lost the race waits for the winner to write its name in the file.
OWNER_WAIT_SECS = 0.5
# How long a harness waits for a dead one's watchdog to end its tools and let the lock go.
REAPING_WAIT_SECS = 3.0


def locks_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where workspace locks live: `$XDG_CACHE_HOME/ouroboros/locks`, by default
    `~/.cache/ouroboros/locks`."""
    env = os.environ if env is None else env
    cache = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "ouroboros" / "locks"


def fallback_locks_dir() -> Path:
    """The locks dir when the cache dir cannot be made (a read-only home)."""
    return Path(tempfile.gettempdir()) / f"ouroboros-{os.getuid()}" / "locks"


def workspace_identity(workspace: Path) -> str:
    """The workspace directory's device and inode: the same through every path to it."""
    info = os.stat(workspace)
    return f"{info.st_dev:x}-{info.st_ino:x}"


def workspace_lock_name(workspace: Path) -> str:
    """The owner file's name for a workspace: its device and inode."""
    return f"{workspace_identity(workspace)}.lock"


def workspace_lock_path(workspace: Path, env: Mapping[str, str] | None = None) -> Path:
    """The workspace's owner file, its directory made (mode 0700) if missing. A locks dir
    under a directory others may change is passed over for the next; one that is there but
    not private to this user (a link, another user's, writable by others) is refused with
    RunLockedError: a planted one would let its owner choose what the harness writes."""
    passed: list[str] = []
    for directory in (locks_dir(env), fallback_locks_dir()):
        top = directory.parent.parent
        try:
            top.mkdir(parents=True, exist_ok=True)
            unsafe = shared_dir_problem(os.stat(top), os.geteuid())
            if unsafe is not None:
                passed.append(f"{top}: {unsafe}")
                continue
            why_not = private_dir(directory)
        except OSError as error:
            passed.append(f"{directory}: {error.strerror or error}")
            continue
        if why_not is not None:
            raise RunLockedError(
                f"will not keep the workspace lock in {why_not}; remove it "
                "(or set XDG_CACHE_HOME to a directory of your own)"
            )
        return directory / workspace_lock_name(workspace)
    raise RunLockedError(
        "cannot keep the workspace lock in a directory of its own: " + "; ".join(passed)
    )


def private_dir(directory: Path) -> str | None:
    """Make `directory` and its parent (`ouroboros`, `ouroboros-<uid>`) with mode 0700 where
    missing; what is wrong with one of them as "PATH: why" (None: both are this user's
    alone). Raises OSError when they cannot be made."""
    for made in (directory.parent, directory):
        try:
            os.mkdir(made, 0o700)
        except FileExistsError:
            pass
    for path in (directory.parent, directory):
        why = own_dir_problem(os.lstat(path), os.geteuid())
        if why is not None:
            return f"{path}: {why}"
    return None


def own_dir_problem(info: os.stat_result, uid: int) -> str | None:
    """Why a directory the harness keeps its locks in is not safe to use (None: it is): it
    must be a directory, not a link, owned by this user and writable by no one else."""
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        return "it is a symbolic link or not a directory"
    if info.st_uid != uid:
        return f"it is owned by uid {info.st_uid}, not by this user (uid {uid})"
    if info.st_mode & 0o022:
        return (
            f"it is writable by others (mode {stat.S_IMODE(info.st_mode):o}); it should "
            "be this user's alone (0700)"
        )
    return None


def state_dir_problem(info: os.stat_result, uid: int) -> str | None:
    """Why a state dir may let another user choose what the harness reads and writes there
    (None: it may not): as shared_dir_problem, but a group may share it (a Kubernetes
    volume's fsGroup, a umask of 002); only every user's write is too many."""
    return shared_dir_problem(info, uid, writers=0o002)


def shared_dir_problem(info: os.stat_result, uid: int, writers: int = 0o022) -> str | None:
    """Why the directory holding the locks' own may let another user replace them (None: it
    may not): writable by others (the `writers` bits: group and other) without the sticky
    bit (as /tmp has), or another user's (other than root's)."""
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a directory"
    if info.st_uid not in (uid, 0):
        return f"it is owned by uid {info.st_uid}, not by this user (uid {uid}) or root"
    if info.st_mode & writers and not info.st_mode & stat.S_ISVTX:
        who = "every user" if writers == 0o002 else "others"
        return (
            f"{who} may write to it (mode {stat.S_IMODE(info.st_mode):o}) and it has no "
            "sticky bit, so they may replace what the harness keeps there"
        )
    return None


def takeover_note(previous: Mapping[str, Any]) -> str:
    """What is known of a dead holder whose lock was taken over, in one line."""
    known = [
        f"on {previous['host']}" if previous.get("host") else "",
        f"run {previous['run_id']}" if previous.get("run_id") else "",
        f"holding it since {previous['since']}" if previous.get("since") else "",
    ]
    details = ", ".join(part for part in known if part)
    return (
        f"took over a stale lock left by pid {previous.get('pid')}"
        + (f" ({details})" if details else "")
        + ": that process no longer holds the kernel lock, so it is gone"
    )


def hold_directory(directory: Path, owner_file: Path, what: str) -> int:
    """An fd on `directory` holding its flock, or RunLockedError naming the holder. A holder
    whose harness is gone may still hold it a moment, while its watchdog ends its tools.
    -1 where the filesystem cannot lock a directory (NFS emulates flock with write locks):
    the owner file's lock, keyed by the same device and inode, is then the only one."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise RunLockedError(f"cannot open {what} to lock it: {error.strerror}") from None
    deadline = time.monotonic() + REAPING_WAIT_SECS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                os.close(fd)
                return -1
        holder = read_holder(owner_file)
        if holder is None or holder_is_alive(holder) or time.monotonic() >= deadline:
            os.close(fd)
            raise RunLockedError(held_message(wait_for_owner(owner_file), what))
        time.sleep(0.01)


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
        fd = open_lock_file(path)
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
        if (
            previous
            and previous.get("host") not in (None, owner["host"])
            and not kernel_lock_spans_hosts(path)
        ):
            os.close(fd)  # another host's lock, on a disk whose flocks it does not share
            raise RunLockedError(
                held_message(previous, what) + f", or delete {path} if you are sure it is gone"
            )
        _write_fd(fd, owner)
        return HeldLock(path, fd, previous if previous and previous != owner else None)
    raise RunLockedError(f"could not take the lock {path}: another process keeps taking it")


def open_lock_file(path: Path) -> int:
    """An fd on the lock file `path` (made if missing) to read and rewrite, never through a
    link: RunLockedError for a symbolic link, a FIFO, a device, or a file with other hard
    links (any of them may be a file elsewhere, which rewriting it would destroy)."""
    try:
        fd = open_regular(path, os.O_RDWR | os.O_CREAT, 0o644)
    except Refused as error:
        raise RunLockedError(
            f"will not use the lock file {path}: {error.strerror}; remove it"
        ) from None
    links = os.fstat(fd).st_nlink
    if links > 1:
        os.close(fd)
        raise RunLockedError(
            f"will not use the lock file {path}: it has {links} hard links, "
            "and one may be a file elsewhere; remove it"
        )
    return fd


def held_message(holder: dict[str, Any] | None, what: str) -> str:
    """The one line naming who holds a lock: "another Ouroboros (pid 42 on box, run R,
    state dir S) is using the workspace W; stop it first"."""
    if not holder:
        return f"another Ouroboros is using {what}; stop it first"
    other = "state_dir" if what.startswith("the workspace") else "workspace"
    where = f", {other.replace('_', ' ')} {holder[other]}" if holder.get(other) else ""
    return (
        f"another Ouroboros (pid {holder.get('pid')} on {holder.get('host')}, run "
        f"{holder.get('run_id')}{where}) is using {what}; stop it first"
    )


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
    directory_fd: int = -1  # the flock on the workspace directory itself

    @property
    def kernel_fds(self) -> list[int]:
        """The fds holding the workspace's kernel lock, for a watchdog to hold as well."""
        return [self.directory_fd] if self.directory_fd >= 0 else []

    def takeover_note(self) -> str | None:
        return takeover_note(self.taken_over) if self.taken_over else None

    @classmethod
    def acquire(
        cls, state_dir: Path, workspace: Path, run_id: str, env: Mapping[str, str] | None = None
    ) -> WorkspaceLock:
        """Take both locks (the workspace's first), or raise RunLockedError naming who holds
        one, or ConfigError when the state dir is not safe to keep a run in (state_dir_problem).
        A lock whose holder died is free, and taken over."""
        make_private_dir(state_dir)
        why = state_dir_problem(os.stat(state_dir), os.geteuid())
        if why is not None:
            raise ConfigError(
                f"will not keep the run in the state dir {state_dir}: {why}; set "
                "logging.state_dir to a directory of your own"
            )
        resolved = workspace.resolve()
        owner = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "run_id": run_id,
            "workspace": str(resolved),
            "state_dir": str(state_dir.resolve()),
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        what = f"the workspace {resolved}"
        owner_file = workspace_lock_path(resolved, env)
        directory = hold_directory(resolved, owner_file, what)
        lock = cls(state_dir / LOCK_FILE, directory_fd=directory)
        try:
            first = take(owner_file, owner, what)
            lock.held.append(first)
            second = take(state_dir / LOCK_FILE, owner, f"the state dir {state_dir}")
            lock.held.append(second)
        except BaseException:
            lock.release()
            raise
        lock.taken_over = second.previous or first.previous
        return lock

    def release(self) -> None:
        for held in reversed(self.held):
            held.release()
        self.held = []
        if self.directory_fd >= 0:
            os.close(self.directory_fd)
            self.directory_fd = -1


def signal_holder(path: Path, signum: int) -> dict[str, Any] | None:
    """Send `signum` to the harness holding the lock file `path` on this host; the holder
    signalled, or None when no process holds the lock (the pid in the file, if any, is then
    left alone: it may be another process's by now). The process is pinned (a pidfd) before
    the lock is checked again, so a pid reused in between is not signalled."""
    holder = live_holder(path)
    pid = holder.get("pid") if holder is not None else None
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    except (AttributeError, OSError):  # no pidfds here: the lock, checked just now, tells
        os.kill(pid, signum)
        return holder
    try:
        again = live_holder(path)
        if again is None or again.get("pid") != pid:
            return None
        signal.pidfd_send_signal(pidfd, signum)
    except ProcessLookupError:
        return None
    finally:
        os.close(pidfd)
    return holder


def _same_file(fd: int, path: Path) -> bool:
    try:
        named = os.stat(path, follow_symlinks=False)
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
