"""Tool processes in a cgroup of their own, where cgroup v2 is writable (a root harness, or a
delegated subtree): `<the harness's cgroup>/ouroboros-tools-<workspace tag>`. However a
command hides (a new session, a cleared environment, a double fork), it cannot leave the
cgroup, and `cgroup.kill` ends every process in it at once, with no pid to recycle.

A command is started with the harness moved into the cgroup for the moment of the fork
(`holding`): the child is born inside it, so nothing it forks is ever outside. The move is
two writes to cgroup.procs (~0.1 ms). Where the cgroup cannot be made, `create` returns None:
the reaper's scan of markers, sessions and descendants does the work, and the harness becomes
the subreaper of its tools' orphans (orphans.py). `OUROBOROS_NO_CGROUP=1` in the harness's
environment takes that path on purpose (to test it, or where a cgroup is unwanted).

    cgroup = ToolCgroup.of(tag).create()
    with cgroup.holding():
        process = subprocess.Popen(...)
    cgroup.kill()   # pids it held; the cgroup removed
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

GONE_WAIT_SECS = 2.0
NO_CGROUP_ENV = "OUROBOROS_NO_CGROUP"


def cgroup2_mount(mountinfo: str) -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (`/proc/self/mountinfo` text)."""
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        if right.split()[:1] == ["cgroup2"] and len(fields) > 4:
            return Path(fields[4])
    return None


def own_cgroup(proc_cgroup: str) -> str | None:
    """This process's cgroup v2 path (`/proc/self/cgroup` text: the `0::` line)."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or "/"
    return None


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


@dataclass(frozen=True)
class ToolCgroup:
    path: Path  # the tools' cgroup
    home: Path  # the cgroup the harness lives in

    @classmethod
    def of(cls, tag: str) -> ToolCgroup | None:
        """The workspace's tool cgroup (not made yet), or None without cgroup v2 (or with
        OUROBOROS_NO_CGROUP=1)."""
        if os.environ.get(NO_CGROUP_ENV) == "1":
            return None
        mount = cgroup2_mount(_read("/proc/self/mountinfo"))
        own = own_cgroup(_read("/proc/self/cgroup"))
        if mount is None or own is None:
            return None
        home = mount / own.lstrip("/")
        return cls(home / f"ouroboros-tools-{tag}", home)

    def create(self) -> ToolCgroup | None:
        """Make it and check that this process may move in and out; None where it cannot."""
        try:
            self.path.mkdir(exist_ok=True)
            with self.holding():
                pass
        except OSError:
            try:
                self.path.rmdir()
            except OSError:
                pass
            return None
        return self

    @contextmanager
    def holding(self) -> Iterator[None]:
        """This process inside the cgroup meanwhile: what it starts is born there."""
        _move(os.getpid(), self.path)
        try:
            yield
        finally:
            _move(os.getpid(), self.home)

    def kill(self) -> list[int]:
        """Kill every process in it, wait until they are gone and remove it; their pids."""
        pids = [int(p) for p in _read(str(self.path / "cgroup.procs")).split()]
        if not self.path.is_dir():
            return []
        try:
            (self.path / "cgroup.kill").write_text("1")
        except OSError:
            return []  # before Linux 5.14: the scan of markers does it
        deadline = time.monotonic() + GONE_WAIT_SECS
        while _read(str(self.path / "cgroup.procs")).strip() and time.monotonic() < deadline:
            time.sleep(0.005)
        try:
            self.path.rmdir()
        except OSError:
            pass
        return pids


def _move(pid: int, cgroup: Path) -> None:
    with open(cgroup / "cgroup.procs", "w") as procs:
        procs.write(str(pid))
