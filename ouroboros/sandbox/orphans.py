"""Orphaned tool processes come back to the harness, where no cgroup holds them.

A background job that leaves its session and clears its environment (`setsid env -i cmd &`)
and whose shell then exits carries nothing that ties it to the workspace: the reaper's scan
of markers, sessions and descendants cannot find it. With `PR_SET_CHILD_SUBREAPER` on the
harness, such an orphan is re-parented to the harness instead of to init. The harness's
children are then the ones it started itself (the tool shells until they are reaped, the
watchdog) and the adopted orphans, told apart by two marks: the harness did not start them,
and they live in a session not the harness's own (every tool starts a session of its own,
and its orphans keep that session or make a new one).

Adopted orphans are reaped as they exit (before each new command, so their zombies never
pile up) and killed at the end of the run, round after round (what they fork comes back to
the harness too), through pidfds: a child not yet reaped keeps its pid, so the number
signalled can never have been given to another process.

The harness also names each running orphan it finds (pid and start time) to its watchdog,
after each command and before the next: if the harness is killed (`kill -9`), its orphans go
to init, and the watchdog kills those named, and theirs. One made and orphaned after the last
look is left to the watchdog's scan of markers and sessions.

    orphans = Orphans.adopt()     # None where the kernel refuses (not Linux)
    orphans.started(popen)        # each child the harness starts itself
    orphans.reap_exited()         # before and after each command
    orphans.kill_all()            # at the end of the run
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ouroboros.sandbox.reaper import _read, _stat_fields

PR_SET_CHILD_SUBREAPER = 36
MAX_ROUNDS = 50  # kill rounds while orphans keep forking


def _stat(pid: int) -> list[bytes] | None:
    """The fields of `/proc/<pid>/stat` after the command name: state, ppid, pgrp, session."""
    stat = _read(f"/proc/{pid}/stat")
    return None if stat is None else _stat_fields(stat)


def own_children(of: int | str = "self") -> list[int]:
    """This process's children (or those of the process `of`), of every thread, zombies
    included."""
    found: list[int] = []
    for task in Path(f"/proc/{of}/task").iterdir():
        try:
            found += [int(pid) for pid in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _set_subreaper(on: bool) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0


def _kill_child(pid: int) -> None:
    """SIGKILL a child of ours through a pidfd; gone already is fine."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        signal.pidfd_send_signal(fd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass
class Orphans:
    """The harness as the subreaper of its tools' orphans."""

    session: int  # the harness's own session
    own: weakref.WeakSet[subprocess.Popen[bytes]] = field(default_factory=weakref.WeakSet)
    tell: Callable[[int, int], None] | None = None  # names a running orphan to the watchdog
    told: set[tuple[int, int]] = field(default_factory=set)

    @classmethod
    def adopt(cls) -> Orphans | None:
        """Make this process a subreaper; None where it cannot be."""
        if not os.path.isdir("/proc/self/task") or not _set_subreaper(True):
            return None
        return cls(os.getsid(0))

    def started(self, process: subprocess.Popen[bytes]) -> None:
        """A child the harness started itself: never taken for an orphan."""
        self.own.add(process)

    def adopted(self) -> list[tuple[int, bool]]:
        """The adopted orphans: (pid, still running)."""
        return [(pid, running) for pid, running, _ in self._adopted()]

    def _adopted(self) -> list[tuple[int, bool, int]]:
        mine = {p.pid for p in self.own if p.returncode is None}
        found = []
        for pid in own_children():
            fields = _stat(pid)
            if pid in mine or fields is None or len(fields) < 20:
                continue
            if int(fields[3]) == self.session:
                continue
            found.append((pid, fields[0] not in (b"Z", b"X"), int(fields[19])))
        return found

    def reap_exited(self) -> None:
        """Collect the orphans that have exited, so that no zombie piles up, and name the
        running ones to the watchdog (each once)."""
        running_now = set()
        for pid, running, start in self._adopted():
            if not running:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                continue
            running_now.add((pid, start))
            if self.tell is not None and (pid, start) not in self.told:
                self.tell(pid, start)
        self.told = running_now

    def kill_all(self) -> list[int]:
        """Kill every adopted orphan, and what comes back from them, and reap them all."""
        killed: list[int] = []
        for _ in range(MAX_ROUNDS):
            found = self.adopted()
            if not found:
                break
            for pid, running in found:
                if running:
                    _kill_child(pid)
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass
                if running:
                    killed.append(pid)
        return killed

    def release(self) -> list[int]:
        """At the end of the run: kill them all, and stop being a subreaper."""
        killed = self.kill_all()
        _set_subreaper(False)
        return killed
