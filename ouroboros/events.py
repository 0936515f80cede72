"""The append-only event log (`events.jsonl`), the run's snapshot, and reading them back.

Layout of a run's directory, `<state_dir>/runs/<run_id>/`:
    events.jsonl      one JSON object per line, written as things happen
    state.json        the latest snapshot: conversation and counters (atomic replace)
    observations/     the full text of every tool result, for `recall`

Every record has `type`, `ts` (ISO 8601 UTC), `seq`, `session` and `turn`; the first record
(`run_start`) also carries `format_version`. The README documents every type.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from ouroboros.errors import UsageError

FORMAT_VERSION = 1
EVENTS_FILE = "events.jsonl"
SNAPSHOT_FILE = "state.json"

Listener = Callable[[dict[str, Any]], None]


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


class EventLog:
    """Appends events to events.jsonl and tells listeners (the terminal views) about each.

    Each line is flushed to the OS as written; `sync()` (at every turn boundary) makes it
    durable with fsync.
    """

    def __init__(self, path: Path, *, seq: int = 0, session: int = 1, turn: int = 0) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.seq = seq
        self.session = session
        self.turn = turn
        self._file = path.open("a", encoding="utf-8")
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def emit(self, type: str, **fields: Any) -> dict[str, Any]:
        self.seq += 1
        record = {"type": type, "ts": utc_now(), "seq": self.seq,
                  "session": self.session, "turn": self.turn, **fields}
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()
        for listener in self._listeners:
            listener(record)
        return record

    def sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed:
            self.sync()
            self._file.close()


@dataclass
class LogContents:
    events: list[dict[str, Any]]
    torn_line: str | None  # a last line cut short by a crash, ignored
    valid_bytes: int  # the length of the file up to the last whole record


def read_events(path: Path) -> LogContents:
    """Every whole record of a log. A torn last line (the process died mid-write) is set
    aside; a bad line anywhere else is a corrupted log."""
    data = path.read_bytes()
    events: list[dict[str, Any]] = []
    offset = 0
    for raw in data.splitlines(keepends=True):
        try:
            record = json.loads(raw)
            if not raw.endswith(b"\n") or not isinstance(record, dict):
                raise ValueError("incomplete record")
        except ValueError:
            if offset + len(raw) >= len(data):
                return LogContents(events, raw.decode("utf-8", "replace"), offset)
            raise UsageError(f"{path}: line {len(events) + 1} is not a JSON event; "
                             "the log is corrupted") from None
        events.append(record)
        offset += len(raw)
    return LogContents(events, None, offset)


def iter_events(path: Path) -> Iterator[dict[str, Any]]:
    """Whole records of a log that may be growing; a torn last line is skipped."""
    yield from read_events(path).events


def write_atomically(path: Path, text: str) -> None:
    """Write a file so that a crash leaves either the old or the new content, never a mix."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_snapshot(run_dir: Path, seq: int, state: dict[str, Any]) -> None:
    """Save the run's state as of event `seq`; resume starts from the latest snapshot."""
    snapshot = {"format_version": FORMAT_VERSION, "seq": seq, "state": state}
    write_atomically(run_dir / SNAPSHOT_FILE, json.dumps(snapshot, ensure_ascii=False))


def read_snapshot(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / SNAPSHOT_FILE
    if not path.is_file():
        return None
    snapshot = json.loads(path.read_text(encoding="utf-8"))
    if snapshot.get("format_version", 0) > FORMAT_VERSION:
        raise UsageError(f"{path} was written by a newer Ouroboros (format "
                         f"{snapshot['format_version']}, this one reads {FORMAT_VERSION}); "
                         "upgrade to resume it")
    return snapshot


def runs_dir(state_dir: Path) -> Path:
    return state_dir / "runs"


def list_runs(state_dir: Path) -> list[str]:
    """Run ids, oldest first (ids start with their UTC start time)."""
    root = runs_dir(state_dir)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / EVENTS_FILE).is_file())


def find_run(state_dir: Path, run_id: str | None) -> Path:
    """The directory of the named run, or of the latest one."""
    runs = list_runs(state_dir)
    if run_id is None:
        if not runs:
            raise UsageError(f"no runs in {runs_dir(state_dir)}; start one with `ouroboros run`")
        return runs_dir(state_dir) / runs[-1]
    if run_id not in runs:
        known = ", ".join(runs[-5:]) or "none"
        raise UsageError(f"no run {run_id!r} in {runs_dir(state_dir)} (latest: {known})")
    return runs_dir(state_dir) / run_id
