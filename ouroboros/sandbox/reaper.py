"""Tool processes die with the harness.

Every shell command carries a marker in its environment naming its workspace
(`OUROBOROS_TOOL_WORKSPACE=<tag>`); its children inherit it. The harness, unconfined, finds
them by scanning `/proc/*/environ`, and also takes every process in the same session as a
marked one (each command starts its own session, so this catches a child that cleared its
environment). Only a process that both leaves the session (setsid) and clears its
environment escapes.

Three moments use it:
- a run starting or resuming in a workspace kills what an earlier harness left there, before
  an interrupted call is answered and before any new tool runs;
- a watchdog process started with the run (`python -m ouroboros.sandbox.reaper TAG`) waits for the
  harness to go, however it goes (`kill -9` included: its pipe closes), then kills them;
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


@dataclass(frozen=True)
class Process:
    pid: int
    session: int
    marked: bool  # carries this workspace's marker


def victims(processes: list[Process], own_sessions: set[int]) -> list[int]:
    """The tool processes among `processes`: the marked ones and those in a marked one's
    session. A session of ours or of our ancestors, or session 0 (the kernel's, and processes
    started outside any session), is never taken whole: only its marked members are; nor is
    one whose leader is alive and unmarked (a tool's session is led by its marked shell)."""
    unmarked_leaders = {p.pid for p in processes if p.pid == p.session and not p.marked}
    sessions = {p.session for p in processes if p.marked} - own_sessions - unmarked_leaders - {0}
    return sorted(p.pid for p in processes if p.marked or p.session in sessions)


def _processes(entry: bytes) -> list[Process]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        stat = _read(f"/proc/{name}/stat")
        session = session_of(stat) if stat is not None and is_running(stat) else None
        if session is None:
            continue
        environ = _read(f"/proc/{name}/environ") or b""
        found.append(Process(int(name), session, entry in environ.split(b"\0")))
    return found


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


def tool_processes(tag: str) -> list[int]:
    """Running processes started by shell commands in the workspace tagged `tag`."""
    return victims(_processes(marker_entry(tag).encode()), _own_sessions())


def reap(tag: str) -> list[int]:
    """Kill every tool process of the workspace tagged `tag`; return their pids once they are
    gone (or zombies). Linux only: elsewhere there is no /proc to scan and nothing is done."""
    if not os.path.isdir("/proc/self"):
        return []
    killed: set[int] = set()
    for _ in range(MAX_ROUNDS):
        found = [pid for pid in tool_processes(tag) if pid not in killed]
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        killed.update(found)
    deadline = time.monotonic() + GONE_WAIT_SECS
    while time.monotonic() < deadline and any(is_running(_read(f"/proc/{p}/stat"))
                                              for p in killed):
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
            [sys.executable, "-m", "ouroboros.sandbox.reaper", tag], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            pass_fds=tuple(lock_fds))
        return cls(process)

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
        self.process = None


def watch(tag: str) -> None:
    """The watchdog's life: wait for the harness's end of the pipe to close, then kill the
    workspace's tool processes and remove its private temp dirs."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    while sys.stdin.buffer.read(4096):
        pass
    reap(tag)
    remove_temp_dirs(tag)


if __name__ == "__main__":
    watch(sys.argv[1])
