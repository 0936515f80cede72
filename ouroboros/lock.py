"""One harness per workspace: a lock file in the state dir naming the owner's pid and host."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from ouroboros.errors import RunLockedError

LOCK_FILE = "lock"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class WorkspaceLock:
    path: Path
    taken_over: dict | None = None  # the stale owner we replaced, to report

    @classmethod
    def acquire(cls, state_dir: Path, run_id: str) -> WorkspaceLock:
        """Take the lock, or raise RunLockedError naming who holds it. A lock whose process is
        gone (same host) is stale and taken over."""
        state_dir.mkdir(parents=True, exist_ok=True)
        path = state_dir / LOCK_FILE
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "run_id": run_id}
        stale = None
        for _ in range(2):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                holder = read_holder(path)
                if holder and holder_is_alive(holder):
                    raise RunLockedError(
                        f"another Ouroboros (pid {holder.get('pid')} on {holder.get('host')}, "
                        f"run {holder.get('run_id')}) is using this workspace; stop it first, or "
                        f"delete {path} if you are sure it is gone") from None
                stale = holder or {}
                path.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as f:
                json.dump(owner, f)
            return cls(path, stale)
        raise RunLockedError(f"could not take the lock {path}: another process keeps taking it")

    def release(self) -> None:
        holder = read_holder(self.path)
        if holder and holder.get("pid") == os.getpid():
            self.path.unlink(missing_ok=True)


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
