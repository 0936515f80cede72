"""Reading a run's events.jsonl while another process writes it (`logs --follow`, `watch`)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, Iterator

from ouroboros.store.log import parse_logged, parse_record
from ouroboros.store.events import EventBase, RunEnd

POLL_SECS = 0.25


def follow_events(path: Path, wait: Callable[[], None] | None = None) -> Iterator[EventBase]:
    """Every record of the log, then each new one as it is written, until a run_end record
    that nothing follows. A last line still being written is held back until it is whole; a
    line that never becomes JSON (torn by a crash, then cut off by `resume`) is skipped.
    `wait` is called whenever there is nothing new (default: sleep a quarter second).

        for event in follow_events(run_dir / "events.jsonl"):
            print(event.type)
    """
    wait = wait or (lambda: time.sleep(POLL_SECS))
    pending = b""
    ended = False
    with path.open("rb") as log:
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
