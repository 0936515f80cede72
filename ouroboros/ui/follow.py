"""Reading a run's events.jsonl while another process writes it (`logs --follow`, `watch`)."""

from __future__ import annotations

import os
import re
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator

from ouroboros.store.events import EventBase
from ouroboros.store.log import EVENTS_FILE, last_records, parse_logged, parse_record, run_records

POLL_SECS = 0.25


def follow_events(
    path: Path, wait: Callable[[], None] | None = None, after_seq: int = 0
) -> Iterator[EventBase]:
    """Every record of the log (after `after_seq`: those the caller has shown are passed over
    unparsed), then each new one as it is written, until a run_end record that nothing
    follows. A last line still being written is held back until it is whole; a
    line that never becomes JSON (torn by a crash, then cut off by `resume`) is skipped.
    When the writer closes the segment (renames the file into segments/), what is left of
    it is read, then the new file at `path`. `wait` is called whenever there is nothing new
    (default: sleep a quarter second).

        for event in follow_events(run_dir / "events.jsonl"):
            print(event.type)
    """
    wait = wait or (lambda: time.sleep(POLL_SECS))
    pending = b""
    ended = False
    log = path.open("rb")
    try:
        while True:
            chunk = log.read()
            if not chunk:
                if ended:
                    return
                if os.fstat(log.fileno()).st_size < log.tell():  # resume cut a torn line off
                    log.seek(0, os.SEEK_END)
                    pending = b""
                if rolled_over(path, log):
                    log.close()
                    log, pending = path.open("rb"), b""
                    continue
                wait()
                continue
            *lines, pending = (pending + chunk).split(b"\n")
            for raw in lines:
                record = parse_record(raw)
                if record is None:
                    continue
                ended = record["type"] == "run_end"
                if record["seq"] > after_seq:
                    yield parse_logged(record, path)
    finally:
        log.close()


def rolled_over(path: Path, log: BinaryIO) -> bool:
    """Whether `path` is now another file than the one being read (a new segment)."""
    try:
        return os.stat(path).st_ino != os.fstat(log.fileno()).st_ino
    except OSError:  # between the rename and the new file: not yet
        return False


SINCE_HELP = (
    "'start' (the whole log), a time ago (90s, 10m, 2h, 1d) or a UTC time (2026-11-27T02:00:00Z)"
)
_AGO = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def since_cutoff(text: str, now: datetime) -> datetime | None:
    """When `--since TEXT` begins: None for "start" (the whole log), `now` less a duration
    ("10m"), or a UTC time; ValueError naming what is allowed otherwise."""
    text = text.strip()
    if text == "start":
        return None
    if found := _AGO.fullmatch(text):
        return now - timedelta(seconds=float(found.group(1)) * _UNITS[found.group(2)])
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--since must be {SINCE_HELP}, got {text!r}") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def written_since(record: dict, cutoff: datetime) -> bool:
    """Whether a record was written at or after `cutoff` (one without a readable time: yes)."""
    try:
        return datetime.fromisoformat(str(record.get("ts", "")).replace("Z", "+00:00")) >= cutoff
    except ValueError:
        return True


def follow_run(
    run_dir: Path,
    newest: int | None = None,
    wait: Callable[[], None] | None = None,
    kept: Callable[[str], bool] = lambda kind: True,
    since: datetime | None = None,
) -> Iterator[EventBase]:
    """A run's records across its segments (only the `newest` N whose type `kept` accepts, if
    given; only those written at or after `since`, if given), then each new one as it is
    written (see follow_events). `newest=0`: from the end, only what is written from now on.
    A segment closed between reading the manifest and opening the current file is read from
    segments/, so nothing is missed."""
    last = 0
    if newest is not None:  # the newest N, and where following starts even when N is 0
        newer = last_records(run_dir, max(newest, 1), kept)
        last = newer[-1]["seq"] if newer else 0
        records: Iterable[dict] = newer[-newest:] if newest else []
    else:
        records = run_records(run_dir)
    for record in records:
        last = record["seq"]
        if since is None or written_since(record, since):
            yield parse_logged(record, run_dir / EVENTS_FILE)
    for event in follow_events(run_dir / EVENTS_FILE, wait, after_seq=last):
        if event.seq <= last:
            continue
        if last and event.seq > last + 1:  # closed meanwhile
            for record in run_records(run_dir, after_seq=last):
                if record["seq"] >= event.seq:
                    break
                yield parse_logged(record, run_dir / EVENTS_FILE)
        last = event.seq
        yield event
