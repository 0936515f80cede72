"""Who holds a harness's lock file, read from outside without taking the lock: `status`,
`runs` and `reload` ask it of the state dir's `lock` to find the running harness, and the
workspace lock (sandbox/lock.py) asks it of a holder it meets.

A lock file names its holder (pid, host, run, state dir) in a line of JSON; the kernel lock
on it says whether that holder still runs: a pid alone proves nothing (after a crash it may be
another process's), and a holder on another host is alive while the kernel lock is held where
the filesystem shares flocks between hosts.

    holder = live_holder(state_dir / LOCK_FILE)   # None: no harness runs there now
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
from pathlib import Path
from typing import Any

from ouroboros.store.files import open_regular, read_regular

LOCK_FILE = "lock"
MAX_LOCK_BYTES = 64 * 1024  # a lock file names its holder in a line
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


def read_holder(path: Path) -> dict | None:
    """What the lock file `path` says of its holder; None when there is no such file, it
    cannot be read, or it is not a lock file (a link, a FIFO, too big)."""
    try:
        holder = json.loads(read_regular(path, MAX_LOCK_BYTES))
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


def lock_is_held(path: Path) -> bool | None:
    """Whether a process holds `path`'s flock now (probed by taking it shared and letting it
    go at once); None when that cannot be told."""
    try:
        fd = open_regular(path)
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
    """Whether the process a lock file (`path`, when given) names still runs the harness.
    With `path`, the kernel lock alone tells: a process holds it, or the harness is gone
    (a pid alone proves nothing: after a crash it may be another process's). Another host's
    holder, where the filesystem does not share flocks between hosts, is taken to be alive.
    Without `path`, the pid is asked (a holder that just took the lock, for a message)."""
    here = holder.get("host") == socket.gethostname()
    if path is not None and (here or kernel_lock_spans_hosts(path)):
        held = lock_is_held(path)
        return held is True if here else held is not False
    if not here:
        return True
    pid = holder.get("pid")
    return isinstance(pid, int) and pid_alive(pid)


def live_holder(path: Path) -> dict[str, Any] | None:
    """The holder the lock file `path` names, when a process holds its kernel lock now."""
    holder = read_holder(path)
    return holder if holder is not None and holder_is_alive(holder, path) else None
