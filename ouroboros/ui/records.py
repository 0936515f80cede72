"""The run's events as JSON lines on stdout (`run --json`, `resume --json`, `watch --json`):
one object per event, the record exactly as the log holds it, for a log shipper. Bookkeeping
records (checkpoints: what a step changed in the run's state) are left out, as `logs` leaves
them out."""

from __future__ import annotations

from typing import Callable, TextIO

from ouroboros.store.events import EventBase
from ouroboros.ui.plain import BOOKKEEPING, line_printer


def json_line(event: EventBase) -> str | None:
    """The event's record as one line of JSON; None for bookkeeping."""
    return None if event.type in BOOKKEEPING else event.to_json()


def json_printer(
    out: TextIO | None = None, *, on_closed: Callable[[], None] | None = None
) -> Callable[[EventBase], None]:
    """A listener printing json_line to `out` (default: sys.stdout at the time of printing).
    When the reader goes away (a broken pipe), printing stops and `on_closed` is called once."""
    return line_printer(json_line, out, on_closed=on_closed)
