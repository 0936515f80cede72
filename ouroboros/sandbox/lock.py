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
  running harness.

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
# How long a harness waits for a dead one's watchdog to end its tools and let the lock go.
REAPING_WAIT_SECS = 3.0
# Filesystems whose flocks other hosts do not see (a prefix of the type: "fuse.sshfs").
HOST_LOCAL_LOCKS = ("cifs", "smb3", "smbfs", "9p", "fuse", "fuseblk", "virtiofs")


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


def workspace_identity(workspace: Path) -> str:
    """The workspace directory's device and inode: the same through every path to it."""
    info = os.stat(workspace)
    return f"{info.st_dev:x}-{info.st_ino:x}"


def workspace_lock_name(workspace: Path) -> str:
    """The owner file's name for a workspace: its device and inode."""
    return f"{workspace_identity(workspace)}.lock"


def workspace_lock_path(workspace: Path, env: Mapping[str, str] | None = None) -> Path:
    """The workspace's owner file, its directory made (mode 0700) if missing."""
    for directory in (locks_dir(env), fallback_locks_dir()):
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError:
            continue
        return directory / workspace_lock_name(workspace)
    raise RunLockedError(f"cannot make a directory for the workspace lock: tried "
                         f"{locks_dir(env)} and {fallback_locks_dir()}")


def mount_of(path: Path, mountinfo: str) -> tuple[str, str]:
    """The filesystem type and mount options (`/proc/self/mountinfo` text) of the mount that
    holds `path`, an absolute resolved path; ("", "") when none is listed."""
    best, found, target = -1, ("", ""), str(path)
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 6 or not tail:
            continue
        point = fields[4].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= best:  # a later mount on the same point hides the earlier
            best = len(point)
            found = (tail[0], ",".join([fields[5], *tail[2:3]]))
    return found


def flocks_span_hosts(fstype: str, options: str) -> bool:
    """Whether a flock on this filesystem is seen by every host that mounts it: true of local
    disks (one host at a time) and of NFS with its lock manager; not of SMB, 9p or FUSE."""
    if fstype.split(".")[0] in HOST_LOCAL_LOCKS:
        return False
    if fstype.startswith("nfs"):
        return not {"nolock", "local_lock=flock", "local_lock=all"} & set(options.split(","))
    return bool(fstype)


def kernel_lock_spans_hosts(path: Path) -> bool:
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return False
    return flocks_span_hosts(*mount_of(path.resolve(), mountinfo))


def takeover_note(previous: Mapping[str, Any]) -> str:
    """What is known of a dead holder whose lock was taken over, in one line."""
    known = [f"on {previous['host']}" if previous.get("host") else "",
             f"run {previous['run_id']}" if previous.get("run_id") else "",
             f"holding it since {previous['since']}" if previous.get("since") else ""]
    details = ", ".join(part for part in known if part)
    return (f"took over a stale lock left by pid {previous.get('pid')}"
            + (f" ({details})" if details else "")
            + ": that process no longer holds the kernel lock, so it is gone")


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
        if (previous and previous.get("host") not in (None, owner["host"])
                and not kernel_lock_spans_hosts(path)):
            os.close(fd)  # another host's lock, on a disk whose flocks it does not share
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
    directory_fd: int = -1  # the flock on the workspace directory itself

    @property
    def kernel_fds(self) -> list[int]:
        """The fds holding the workspace's kernel lock, for a watchdog to hold as well."""
        return [self.directory_fd] if self.directory_fd >= 0 else []

    def takeover_note(self) -> str | None:
        return takeover_note(self.taken_over) if self.taken_over else None

    @classmethod
    def acquire(cls, state_dir: Path, workspace: Path, run_id: str,
                env: Mapping[str, str] | None = None) -> WorkspaceLock:
        """Take both locks (the workspace's first), or raise RunLockedError naming who holds
        one. A lock whose holder died is free, and taken over."""
        state_dir.mkdir(parents=True, exist_ok=True)
        resolved = workspace.resolve()
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "run_id": run_id,
                 "workspace": str(resolved), "state_dir": str(state_dir.resolve()),
                 "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
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


def read_holder(path: Path) -> dict | None:
    try:
        holder = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


def lock_is_held(path: Path) -> bool | None:
    """Whether a process holds `path`'s flock now (probed by taking it shared and letting it
    go at once); None when that cannot be told."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as error:
        return True if error.errno in (errno.EWOULDBLOCK, errno.EACCES) else None
    finally:
        os.close(fd)  # closing lets a probe's shared lock go
    return False


def holder_is_alive(holder: dict, path: Path | None = None) -> bool:
    """Whether the process a lock file (`path`, when given) names is alive. On another host
    only the kernel lock can tell, where the filesystem shares flocks between hosts; else it
    is taken to be alive."""
    if holder.get("host") != socket.gethostname():
        if path is not None and kernel_lock_spans_hosts(path):
            return lock_is_held(path) is not False
        return True
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
