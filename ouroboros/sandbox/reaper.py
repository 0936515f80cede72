"""Tool processes die with the harness.

Where cgroup v2 is writable, every command is born in the workspace's tool cgroup (see
cgroup.py) and `cgroup.kill` ends them all; elsewhere the harness adopts its tools' orphans
and kills them at the end of the run (orphans.py). Everywhere, every shell command carries
a marker in its environment naming its workspace (`OUROBOROS_TOOL_WORKSPACE=<tag>`); its
children inherit it. The harness, unconfined, finds
them by scanning `/proc/*/environ`, and also takes every process in the same session as a
marked one (each command starts its own session, so this catches a child that cleared its
environment), and every descendant of those (a `setsid env -i cmd &` keeps its parent while
that lives). Processes are killed through pidfds, checked to be the process scanned (the
same start time), never by a number that may have been recycled.

Three moments use it:
- a run starting or resuming in a workspace kills what an earlier harness left there, before
  an interrupted call is answered and before any new tool runs;
- a watchdog process started with the run (`python -m ouroboros.sandbox.reaper TAG`) waits for the
  harness to go, however it goes (`kill -9` included: its pipe closes), then kills them, and
  the orphans the harness adopted and named to it on the pipe (pid and start time, see
  orphans.py);
- the run's end does the same, through the watchdog.

    tag = workspace_tag(workspace)
    killed = reap(tag)             # pids killed, gone when it returns
    watchdog = Watchdog.start(tag); ...; watchdog.stop()
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ouroboros.sandbox.cgroup import ToolCgroup

MARKER = "OUROBOROS_TOOL_WORKSPACE"
MAX_ROUNDS = 50  # scans while processes keep forking
GONE_WAIT_SECS = 2.0


def workspace_tag(workspace: Path) -> str:
    """A short, stable name for a workspace, the same for every path to it (a symlink, a bind
    mount): its device and inode, or its resolved path where it cannot be read."""
    try:
        info = os.stat(workspace)
        identity = f"{info.st_dev:x}-{info.st_ino:x}"
    except OSError:
        identity = str(workspace.resolve())
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def temp_prefix(tag: str) -> str:
    """The name the sandbox's private temp dirs start with, so leftovers can be found."""
    return f"ouroboros-sandbox-{tag}-"


def remove_temp_dirs(tag: str, keep: Path | None = None) -> None:
    """Remove the workspace's private temp dirs (but `keep`) that a harness left behind."""
    for path in Path(tempfile.gettempdir()).glob(temp_prefix(tag) + "*"):
        try:
            if path != keep and path.stat().st_uid == os.getuid():
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass


def marker_entry(tag: str) -> str:
    return f"{MARKER}={tag}"


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def _stat_fields(stat: bytes) -> list[bytes]:
    """The fields of a `/proc/<pid>/stat` line after the command name in parentheses (which
    may itself hold spaces and parentheses): state, ppid, pgrp, session, ..."""
    return stat.rsplit(b")", 1)[-1].split()


def session_of(stat: bytes) -> int | None:
    """The session id in a `/proc/<pid>/stat` line."""
    fields = _stat_fields(stat)
    return int(fields[3]) if len(fields) > 3 else None


def is_running(stat: bytes | None) -> bool:
    """Alive and not a zombie: a zombie cannot act any more."""
    if stat is None:
        return False
    fields = _stat_fields(stat)
    return bool(fields) and fields[0] not in (b"Z", b"X")


def group_left(pgid: int, keep: int) -> list[int]:
    """The processes of process group `pgid` that are not gone yet: those still running, and
    the dead that this process has to reap (its adopted orphans, orphans.py); `keep` (the
    group's shell, which its caller reaps last) left out. The dead that another process
    reaps (init) can no longer act, and are not waited for."""
    me = str(os.getpid()).encode()
    left = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == keep:
            continue
        stat = _read(f"/proc/{entry}/stat")
        fields = _stat_fields(stat) if stat is not None else []
        if len(fields) < 3 or int(fields[2]) != pgid:
            continue
        if fields[0] not in (b"Z", b"X") or fields[1] == me:
            left.append(int(entry))
    return left


@dataclass(frozen=True)
class Process:
    pid: int
    session: int
    marked: bool  # carries this workspace's marker
    parent: int = 0
    start: int = 0  # its start time (clock ticks after boot): a pid reused is another process


def victims(processes: list[Process], own_sessions: set[int]) -> list[int]:
    """The tool processes among `processes`: the marked ones, those in a marked one's
    session, and the descendants of all these (a `setsid env -i cmd &` leaves the session
    and the marker, not its parent). A session of ours or of our ancestors, or session 0 (the
    kernel's, and processes started outside any session), is never taken whole: only its
    marked members are; nor is one whose leader is alive and unmarked (a tool's session is
    led by its marked shell)."""
    unmarked_leaders = {p.pid for p in processes if p.pid == p.session and not p.marked}
    sessions = {p.session for p in processes if p.marked} - own_sessions - unmarked_leaders - {0}
    taken = {p.pid for p in processes if p.marked or p.session in sessions}
    children: dict[int, list[int]] = {}
    for p in processes:
        children.setdefault(p.parent, []).append(p.pid)
    stack = list(taken)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in taken:
                taken.add(child)
                stack.append(child)
    return sorted(taken)


def _processes(entry: bytes, told: frozenset[tuple[int, int]] = frozenset()) -> list[Process]:
    """Every running process but this one; marked if it carries `entry` or is one of `told`
    (pid, start time): orphans the harness adopted and named to its watchdog."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        stat = _read(f"/proc/{name}/stat")
        if stat is None or not is_running(stat):
            continue
        fields = _stat_fields(stat)
        environ = _read(f"/proc/{name}/environ") or b""
        start = int(fields[19])
        marked = entry in environ.split(b"\0") or (int(name), start) in told
        found.append(Process(int(name), int(fields[3]), marked, parent=int(fields[1]), start=start))
    return found


def kill_exactly(process: Process) -> None:
    """SIGKILL `process` through a pidfd, and only if its pid still names it (the same
    start time): a pid recycled since the scan is left alone."""
    try:
        fd = os.pidfd_open(process.pid)
    except OSError:
        return  # gone
    try:
        stat = _read(f"/proc/{process.pid}/stat")
        if stat is not None and int(_stat_fields(stat)[19]) == process.start:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    except (OSError, ValueError, IndexError):
        pass
    finally:
        os.close(fd)


def _started(pid: int) -> int | None:
    """A process's start time, or None when it is gone."""
    stat = _read(f"/proc/{pid}/stat")
    try:
        return int(_stat_fields(stat)[19]) if stat is not None else None
    except (IndexError, ValueError):
        return None


def _own_sessions() -> set[int]:
    """The sessions of this process and its ancestors."""
    sessions, pid = set(), os.getpid()
    while pid > 1:
        stat = _read(f"/proc/{pid}/stat")
        if stat is None:
            break
        fields = _stat_fields(stat)
        sessions.add(int(fields[3]))
        pid = int(fields[1])
    return sessions


def tool_processes(tag: str, told: frozenset[tuple[int, int]] = frozenset()) -> list[Process]:
    """Running processes started by shell commands in the workspace tagged `tag`, and `told`."""
    processes = _processes(marker_entry(tag).encode(), told)
    chosen = set(victims(processes, _own_sessions()))
    return [p for p in processes if p.pid in chosen]


def reap(tag: str, told: frozenset[tuple[int, int]] = frozenset()) -> list[int]:
    """Kill every tool process of the workspace tagged `tag`; return their pids once they are
    gone (or zombies). Linux only: elsewhere there is no /proc to scan and nothing is done."""
    if not os.path.isdir("/proc/self"):
        return []
    cgroup = ToolCgroup.of(tag)
    killed: set[int] = set(cgroup.kill() if cgroup is not None else [])
    for _ in range(MAX_ROUNDS):
        found = [p for p in tool_processes(tag, told) if p.pid not in killed]
        if not found:
            break
        for process in found:
            kill_exactly(process)
        killed.update(p.pid for p in found)
    deadline = time.monotonic() + GONE_WAIT_SECS
    while time.monotonic() < deadline and any(is_running(_read(f"/proc/{p}/stat")) for p in killed):
        time.sleep(0.005)
    return sorted(killed)


@dataclass
class Watchdog:
    """A small process that reaps the workspace's tool processes when the harness goes."""

    process: subprocess.Popen[bytes] | None

    @classmethod
    def start(cls, tag: str, lock_fds: Sequence[int] = ()) -> Watchdog:
        """Start it, holding `lock_fds` (the workspace's kernel lock) until it has reaped, so
        no other harness takes the workspace while this one's tools still run."""
        if not os.path.isdir("/proc/self"):
            return cls(None)
        process = subprocess.Popen(
            [sys.executable, "-m", "ouroboros.sandbox.reaper", tag],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            pass_fds=tuple(lock_fds),
        )
        return cls(process)

    def tell(self, pid: int, start: int) -> None:
        """Name an adopted orphan (pid, start time), to be killed if the harness dies first."""
        if self.process is None or self.process.stdin is None:
            return
        try:
            self.process.stdin.write(f"{pid} {start}\n".encode())
            self.process.stdin.flush()
        except (OSError, ValueError):
            pass

    def stop(self, timeout: float = 10.0) -> None:
        """Have it reap now, and wait until it has."""
        if self.process is None:
            return
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()  # reaped: no zombie left for the rest of the harness's life
        self.process = None


def watch(tag: str) -> None:
    """The watchdog's life: wait for the harness's end of the pipe to close, then kill the
    workspace's tool processes and remove its private temp dirs."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    told: set[tuple[int, int]] = set()
    for line in sys.stdin.buffer:
        pid, _, start = line.partition(b" ")
        if pid.isdigit() and start.strip().isdigit():
            told = {p for p in told if _started(p[0]) == p[1]}  # the gone are forgotten
            told.add((int(pid), int(start)))
    reap(tag, frozenset(told))
    remove_temp_dirs(tag)


if __name__ == "__main__":
    watch(sys.argv[1])
