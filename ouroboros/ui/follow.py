"""Reading a run's events.jsonl while another process writes it (`logs --follow`, `watch`),
and its last events without reading the rest (`logs -n N`)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ouroboros.store.log import parse_logged, parse_record
from ouroboros.store.events import EventBase, RunEnd

POLL_SECS = 0.25
TAIL_BLOCK = 1 << 16
"""Bytes read at a time, backwards from the end, for the last events of a log."""


@dataclass
class Tail:
    """The last events of a log, oldest first; the byte offset just past the last whole line
    (where following it goes on); and whether that line is a run_end (nothing to follow)."""

    events: list[EventBase]
    offset: int
    ended: bool


def tail_events(path: Path, count: int, shown: Callable[[str], bool]) -> Tail:
    """The last `count` events whose type `shown` accepts, read backwards from the end of the
    log, so what it costs grows with `count`, not with the run. A last line still being
    written is left for whoever follows the log.

        tail = tail_events(run_dir / "events.jsonl", 10, lambda type: type != "checkpoint")
    """
    found: list[EventBase] = []
    ended: bool | None = None
    with path.open("rb") as log:
        position = offset = log.seek(0, os.SEEK_END)
        carry, torn = b"", True  # torn: the newline ending the last whole line is not seen yet
        while position > 0 and (len(found) < count or ended is None):
            step = min(TAIL_BLOCK, position)
            position -= step
            log.seek(position)
            data = log.read(step) + carry
            if torn:
                cut = data.rfind(b"\n")
                offset, data, torn = (position + cut + 1, data[:cut], False) if cut >= 0 \
                    else (position, b"", True)
            lines = data.split(b"\n")
            carry = lines.pop(0) if position > 0 else b""
            for raw in reversed(lines):
                record = parse_record(raw)
                if record is None:
                    continue
                event = parse_logged(record, path)
                ended = isinstance(event, RunEnd) if ended is None else ended
                if len(found) < count and shown(event.type):
                    found.append(event)
    return Tail(found[::-1], offset, bool(ended))


def follow_events(path: Path, wait: Callable[[], None] | None = None, *, start: int = 0,
                  ended: bool = False) -> Iterator[EventBase]:
    """Every record of the log from byte `start`, then each new one as it is written, until a
    run_end record that nothing follows (`ended`: the record before `start` was one). A last
    line still being written is held back until it is whole; a line that never becomes JSON
    (torn by a crash, then cut off by `resume`) is skipped. `wait` is called whenever there
    is nothing new (default: sleep a quarter second).

        for event in follow_events(run_dir / "events.jsonl"):
            print(event.type)
    """
    wait = wait or (lambda: time.sleep(POLL_SECS))
    pending = b""
    with path.open("rb") as log:
        log.seek(start)
        while True:
            chunk = log.read()
            if not chunk:
                if ended:
                    return
                if os.fstat(log.fileno()).st_size < log.tell():  # resume cut a torn line off
                    log.seek(0, os.SEEK_END)
                    pending = b""
                wait()
                continue
            *lines, pending = (pending + chunk).split(b"\n")
            for raw in lines:
                record = parse_record(raw)
                if record is not None:
                    event = parse_logged(record, path)
                    ended = isinstance(event, RunEnd)
                    yield event
