"""The append-only event log (`events.jsonl`) and reading it back.

Layout of a run's directory, `<state_dir>/runs/<run_id>/` (format 3):
    events.jsonl      the current segment: one JSON object per line, written as things
                      happen (a log written before the state was versioned also has
                      `checkpoint` events: what each step changed, see state_file.py)
    segments/         closed segments, 000001.jsonl.gz, ... (segments.py)
    manifest.json     what each closed segment spans, and the run's summary as of the newest
    totals.json       that summary again, where retention never prunes (segments.py)
    state.json        the run's state as of an event, written whole at every turn's end
                      (state_file.py; a resume replays the events after it)
    observations/     the full text of every tool result, packed per session, for `recall`
                      (observations.py)
    end-reserve       RESERVE_BYTES kept allocated while the run runs, freed so that the
                      records that end it fit on a disk that filled up
Retention (retention.py) removes the oldest closed segments and packs.

Every record has `type`, `ts` (ISO 8601 UTC), `seq`, `session` and `turn`; the first record
(`run_start`) also carries `format_version`. Each type is a model in events.py.

    log = EventLog(run_dir / EVENTS_FILE)
    log.emit(WarningEvent(message="..."))   # filled in: ts, seq, session, turn
    for record in run_records(run_dir): ...   # every record, across segments, streamed
    tail = read_tail(run_dir)                 # the manifest and the current segment only
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal

from ouroboros.errors import StateError, UsageError
from ouroboros.protocols import Listener
from ouroboros.store.atomic import cannot_write
from ouroboros.store.events import EventBase, EventError, WarningEvent, parse_event
from ouroboros.store.files import no_follow, open_regular, read_prefix
from ouroboros.store.observations import obs_number
from ouroboros.store.retention import Freed, Retention, apply_retention
from ouroboros.store.segments import (
    MANIFEST_FILE,
    SEGMENTS_DIR,
    Manifest,
    close_segment,
    closed_records,
    compress_closed,
    load_manifest,
    parse_record,
    reached,
    segment_path,
    segment_records,
)
from ouroboros.store.state_file import DamagedSnapshot, read_state, redact_strings
from ouroboros.store.summary import RunSummary, envelope, envelope_of

EVENTS_FILE = "events.jsonl"

# The most the current segment holds (give or take the turn that crosses it): it is closed at
# a turn's end once it holds this much, and at the first session boundary once it holds
# 1/BOUNDARY_FRACTION of it (`logging.segment_mb`).
SEGMENT_BYTES = 2 << 20
BOUNDARY_FRACTION = 2
RESERVE_FILE = "end-reserve"
RESERVE_BYTES = 16 << 10  # error, session_end, run_end (a summary of 2,000 characters at most)
Durability = Literal["turn", "event"]


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_run_id(now: datetime | None = None) -> str:
    """The UTC second, then four hex digits of its fraction (16 µs steps): ids sort as the
    runs started, also within one second, and "the latest run" is the one started last."""
    now = now or datetime.now(timezone.utc)
    return now.strftime("%Y%m%d-%H%M%S-") + f"{now.microsecond // 16:04x}"


class EventLog:
    """Appends events to events.jsonl and tells listeners (the terminal views) about each.

    Each line is flushed to the OS as written (a killed process loses nothing), and made
    durable with fsync at every turn boundary (`commit()`), or after every event with
    `durability="event"` (a power cut then loses at most the event being written).
    """

    def __init__(
        self,
        path: Path,
        *,
        seq: int = 0,
        session: int = 1,
        turn: int = 0,
        durability: Durability = "turn",
        summary: RunSummary | None = None,
        current: list[dict[str, Any]] = (),
        segment_bytes: int = SEGMENT_BYTES,
    ) -> None:
        self.path = path
        self.durability = durability
        self.seq = seq
        self.session = session
        self.turn = turn
        # What the manifest will say when this segment is closed (segments.py): the run's
        # summary so far, the current segment's first record, and how big a segment may grow.
        self.summary = summary or RunSummary()
        self.segment_bytes = segment_bytes
        self.retention: Retention | None = None  # what history to keep; None: all of it
        self._turns_before = self.summary.assistants
        self.first = envelope(current[0]) if current else None
        for record in current:
            self.summary.add_record(record)
        refuse_links(path.parent.parent, path.parent)
        with cannot_write(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "ab", buffering=0, opener=no_follow)
            self._size = os.fstat(self._file.fileno()).st_size  # up to the last whole record
        self.reserve = path.parent / RESERVE_FILE
        keep_reserve(self.reserve)
        self._listeners: list[Listener] = []
        self._held: list[tuple[bytes, EventBase]] | None = None  # see together()
        # Known secrets replaced in every record, in the file and for listeners
        # (sandbox/secrets.py).
        self.redact: Callable[[str], str] | None = None

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def emit(self, event: EventBase) -> EventBase:
        """Write `event` as the next record (its envelope filled in) and tell the listeners;
        returns it as written (redacted, where a secret was in it)."""
        self.seq += 1
        event.ts, event.seq, event.session, event.turn = (
            utc_now(),
            self.seq,
            self.session,
            self.turn,
        )
        try:
            if self.redact is not None:
                record = event.record()
                cleaned = {
                    key: value if key == "type" else redact_strings(value, self.redact)
                    for key, value in record.items()
                }  # the type names the record
                if cleaned != record:
                    event = parse_event(cleaned)
            data = (event.to_json() + "\n").encode("utf-8")
        except ValueError:  # a lone surrogate, which UTF-8 cannot hold
            self.seq -= 1
            raise
        if self._held is not None:
            self._held.append((data, event))
        else:
            self._write([(data, event)])
        return event

    @contextmanager
    def together(self) -> Iterator[None]:
        """The records emitted inside are written at the end in one go, all or none (the
        records that end a run: a disk with room for some of them gets none)."""
        self._held = []
        try:
            yield
        finally:
            held, self._held = self._held, None
        try:
            self._write(held)
        except StateError:
            if not free_reserve(self.reserve):
                raise
            self._write(held)  # the disk was full: in the space the reserve held

    def _write(self, records: list[tuple[bytes, EventBase]]) -> None:
        with cannot_write(self.path):
            try:
                self._append(b"".join(data for data, _ in records))
            except OSError:
                self.seq -= len(records)
                raise
            if self.durability == "event":
                os.fsync(self._file.fileno())
        for data, record in records:
            self._fold(data, record)
            for listener in self._listeners:
                listener(record)

    def _fold(self, data: bytes, event: EventBase) -> None:
        head = envelope_of(event)
        if self.first is None:
            self.first = head
            self._turns_before = self.summary.assistants
        self.summary.add(event.type, head, lambda: json.loads(data))

    def _append(self, data: bytes) -> None:
        """Write a whole record, or nothing: a record the disk had no room for is cut off
        again, so the smaller ones that end the run may still fit after it."""
        view = memoryview(data)
        try:
            while view:
                view = view[self._file.write(view) :]
        except OSError:
            try:
                os.ftruncate(self._file.fileno(), self._size)
            except OSError:
                pass
            raise
        self._size += len(data)

    def commit(self) -> None:
        """A turn boundary: make what was logged durable, unless every event already was; a
        segment grown to its full size (a session that never restarts) is closed, and
        retention applied as the state on disk allows (see prune_run)."""
        if self._size >= self.segment_bytes and self.roll() is not None:
            if self.retention is not None:
                with cannot_write(self.path.parent):
                    prune_run(self.path.parent, self.retention)
        elif self.durability != "event":
            self.sync()

    def roll_due(self) -> bool:
        """At a session boundary: whether the current segment is big enough to close."""
        return self._size * BOUNDARY_FRACTION >= self.segment_bytes and self.first is not None

    def at_session_boundary(self, keep_obs_from: int) -> None:
        """Between sessions, just after the state is written: close the segment if it is big
        enough, then let retention remove what it allows (results numbered from
        `keep_obs_from` on are still referred to)."""
        if not self.roll_due():
            return
        self.roll()
        if self.retention is not None:
            with cannot_write(self.path.parent):
                apply_retention(
                    self.path.parent,
                    self.retention,
                    session=self.session,
                    keep_seq=self.seq,
                    keep_obs_from=keep_obs_from,
                )

    def roll(self) -> Manifest | None:
        """Close the current segment (see segments.py) and begin a new one; the manifest as
        it is now, or None when there was nothing to close."""
        if self.first is None or self._held is not None:
            return None
        self.sync()
        run_dir = self.path.parent
        try:
            with cannot_write(run_dir / MANIFEST_FILE):
                manifest = close_segment(
                    run_dir, self.path, self.first, self.summary, self._turns_before
                )
        finally:
            self._reopen()
        reached("rollover: new segment begun")
        compress_closed(run_dir, manifest)
        if manifest.problem is not None:  # rebuilt, and now written whole again
            self.emit(WarningEvent(message=manifest.problem))
        return manifest

    def _reopen(self) -> None:
        """After a rollover, even one that failed half-way (a full disk): write to the file
        at `path` again, a new one where the segment was moved away (the manifest lists it,
        or the next reader finds it unlisted and adds it)."""
        with cannot_write(self.path):
            try:
                same = os.path.samestat(os.stat(self.path), os.fstat(self._file.fileno()))
            except FileNotFoundError:
                same = False
            if same:
                return
            moved, self._file = self._file, open(self.path, "ab", buffering=0, opener=no_follow)
            moved.close()
            self._size, self.first = 0, None

    def sync(self) -> None:
        with cannot_write(self.path):
            os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed:
            try:
                self.sync()
            finally:
                self._file.close()


def keep_reserve(path: Path) -> None:
    """Allocate RESERVE_BYTES at `path` (a regular file, never through a link), unless they
    are there already; nothing where the disk has no room for them."""
    try:
        fd = open_regular(path, os.O_WRONLY | os.O_CREAT, 0o600)
    except OSError:
        return
    try:
        if os.fstat(fd).st_size < RESERVE_BYTES:
            os.posix_fallocate(fd, 0, RESERVE_BYTES)
    except OSError:
        free_reserve(path)
    finally:
        os.close(fd)


def free_reserve(path: Path) -> bool:
    """Give the reserve's space back; whether there was one."""
    try:
        os.unlink(path)
    except OSError:
        return False
    return True


@dataclass
class LogContents:
    events: list[dict[str, Any]]
    torn_line: str | None  # a last line cut short by a crash, ignored
    valid_bytes: int  # the length of the file up to the last whole record


def read_events(path: Path) -> LogContents:
    """Every whole record of a log. A torn last line (the process died mid-write) is set
    aside; a bad line anywhere else is a damaged log (StateError naming the byte)."""
    try:
        fd = open_regular(path)
        try:
            data = read_prefix(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
    except OSError as error:
        raise StateError(f"cannot read {path}: {error.strerror or error}") from None
    events: list[dict[str, Any]] = []
    offset = 0
    for raw in data.splitlines(keepends=True):
        record = parse_record(raw) if raw.endswith(b"\n") else None
        if record is None:
            if offset + len(raw) >= len(data):
                return LogContents(events, raw.decode("utf-8", "replace"), offset)
            raise StateError(
                f"{path} is damaged at byte {offset} (line {len(events) + 1} "
                "is not a whole event); the events before it are intact"
            )
        events.append(record)
        offset += len(raw)
    return LogContents(events, None, offset)


@dataclass
class RunTail:
    """What a reader of a run needs without reading its history: the manifest (the closed
    segments and the run's summary as of the newest) and the current segment's records."""

    run_dir: Path
    manifest: Manifest
    current: LogContents

    @cached_property
    def records(self) -> list[dict[str, Any]]:
        """The current segment's records (any a closed segment holds too left out): worked out
        once, read by several."""
        after = self.manifest.last_seq
        return [r for r in self.current.events if r["seq"] > after]

    @property
    def last_seq(self) -> int:
        records = self.current.events
        return max(records[-1]["seq"] if records else 0, self.manifest.last_seq)

    def summary(self) -> RunSummary:
        """The run's summary as of its newest record."""
        summary = self.manifest.summary()
        for record in self.records:
            summary.add_record(record)
        return summary


def read_tail(run_dir: Path) -> RunTail:
    """The manifest and the current segment of a run (of any format: an old run's single
    events.jsonl is its current segment)."""
    manifest = load_manifest(run_dir)
    path = run_dir / EVENTS_FILE
    current = (
        read_events(path) if path.exists() or not manifest.segments else LogContents([], None, 0)
    )
    return RunTail(run_dir, manifest, current)


def run_records(
    run_dir: Path, after_seq: int = 0, tail: RunTail | None = None
) -> Iterator[dict[str, Any]]:
    """Every record of a run after `after_seq`, oldest first, across its segments: streamed,
    so a long run is never in memory at once (`tail`: the run's, where the caller read it)."""
    tail = tail or read_tail(run_dir)
    yield from closed_records(run_dir, tail.manifest, after_seq)
    yield from (r for r in tail.records if r["seq"] > after_seq)


def last_records(
    run_dir: Path,
    count: int,
    kept: Callable[[str], bool] = lambda kind: True,
    tail: RunTail | None = None,
) -> list[dict[str, Any]]:
    """The newest `count` records of a run whose type `kept` accepts, reading back only as
    many segments as needed (`tail`: the run's, where the caller read it)."""

    def wanted(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        return [record for record in records if kept(str(record.get("type", "")))]

    tail = tail or read_tail(run_dir)
    found = wanted(tail.records)[-count:] if count else []
    for segment in reversed(tail.manifest.segments):
        if len(found) >= count:
            break
        older = wanted(segment_records(segment_path(run_dir, segment["file"])))
        found = older[-(count - len(found)) :] + found
    return found


def read_run_log(run_dir: Path, tail: RunTail | None = None) -> Iterator[EventBase]:
    """Every record of a run as its model, across its segments, streamed."""
    for record in run_records(run_dir, tail=tail):
        yield parse_logged(record, run_dir / EVENTS_FILE)


def read_log(path: Path) -> list[EventBase]:
    """Every whole record of a log as its model (see read_events)."""
    return parse_records(read_events(path).events, path)


def parse_records(records: list[dict[str, Any]], path: Path) -> list[EventBase]:
    """The records read from the log at `path` as their models (see parse_logged)."""
    return [parse_logged(record, path) for record in records]


def parse_logged(record: dict[str, Any], path: Path) -> EventBase:
    """A record read from the log at `path` as its model; one that does not fit its type is
    a damaged log (StateError naming the file)."""
    try:
        return parse_event(record)
    except EventError as error:
        raise StateError(f"{path} is damaged: {error.message}") from None


def runs_dir(state_dir: Path) -> Path:
    return state_dir / "runs"


def refuse_links(*directories: Path) -> None:
    """StateError (one line) when one of the directories the harness keeps a run's files in
    is a symbolic link: it would write (or read) wherever the link leads."""
    for directory in directories:
        if directory.is_symlink():
            raise StateError(
                f"{directory} is a symbolic link; the harness keeps its runs in a "
                "directory of its own there and does not follow a link: remove "
                "it"
            )


def list_runs(state_dir: Path) -> list[str]:
    """Run ids, oldest first (ids start with their UTC start time). StateError when the
    runs dir is a symbolic link."""
    root = runs_dir(state_dir)
    refuse_links(root)
    if not root.is_dir():
        return []
    return sorted(
        p.name
        for p in root.iterdir()
        if (p / EVENTS_FILE).is_file()
        or (p / MANIFEST_FILE).is_file()
        or (p / SEGMENTS_DIR).is_dir()
    )


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


def prune_run(run_dir: Path, retention: Retention) -> Freed:
    """Apply retention to a run now (`ouroboros prune`): what its state still needs (the
    records after it, the results its conversation refers to) is kept."""
    try:
        saved = read_state(run_dir)
    except DamagedSnapshot:
        saved = None
    if saved is None:  # a resume would rebuild from the whole log: remove nothing
        return apply_retention(run_dir, retention, session=0, keep_seq=0, keep_obs_from=0)
    state = saved.state
    context = state.get("context") or {}
    numbers = [
        obs_number(str(o.get("id", "")))
        for o in (context.get("observations") or {}).values()
        if isinstance(o, dict)
    ]
    keep_from = min(
        (n for n in numbers if n is not None), default=int(context.get("next_observation", 0))
    )
    return apply_retention(
        run_dir,
        retention,
        session=int(state.get("session", 0)),
        keep_seq=saved.seq,
        keep_obs_from=keep_from,
    )
