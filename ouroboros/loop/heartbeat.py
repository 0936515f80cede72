"""The run's heartbeat: `<state_dir>/heartbeat`, one small JSON object rewritten at events (at
most once a second: a turn's events come in bursts) and, while the run waits (a model reply, a
retry's backoff, a tool call, an idle pause), every `metrics.heartbeat_secs` seconds. A probe
reads two ages from it: `beat` (the process is alive and its event loop turns) and `last_event`
(the run is making progress); `doing` says what it waits on, since when. A fresh beat with an
old last event is "alive, waiting on <doing>"; an old beat is a process that is stuck (or
gone).

    heartbeat = Heartbeat(state_dir / HEARTBEAT_FILE, run_id)
    log.subscribe(heartbeat.on_event)
    task = asyncio.ensure_future(heartbeat.keep_beating(15))
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from ouroboros.store.atomic import replace_in
from ouroboros.store.events import EventBase, ToolCallEvent
from ouroboros.store.files import read_regular
from ouroboros.store.log import utc_now

HEARTBEAT_FILE = "heartbeat"
MAX_HEARTBEAT_BYTES = 64 * 1024  # the record is a few hundred bytes
# What the run waits on after each kind of event; after any other, the model's next reply.
DOING = {
    "retry": "retry backoff",
    "idle": "idle pause",
    "run_end": "ended",
    "session_end": "session restart",
    "stop_requested": "stopping",
}
QUIET = frozenset({"checkpoint"})  # bookkeeping: not progress to a probe


def doing_after(event: EventBase) -> str:
    """What the run waits on after `event`: "tool shell_exec", "model", "retry backoff"."""
    if isinstance(event, ToolCallEvent):
        return f"tool {event.name}"
    return DOING.get(event.type, "model")


class Heartbeat:
    """Keeps the heartbeat file; `now` is the clock (UTC ISO 8601, as the log's `ts`), `ticks`
    a monotonic one for the gap between writes at events."""

    def __init__(
        self,
        path: Path,
        run_id: str,
        now: Callable[[], str] = utc_now,
        ticks: Callable[[], float] = time.monotonic,
        min_gap_secs: float = 1.0,
    ) -> None:
        self.path = path
        self.now = now
        self.ticks = ticks
        self.min_gap_secs = min_gap_secs
        self.written_at: float | None = None
        self.record: dict[str, Any] = {
            "pid": os.getpid(),
            "run_id": run_id,
            "beat": "",
            "session": 0,
            "turn": 0,
            "last_event": None,
            "last_event_type": None,
            "doing": "starting",
            "since": now(),
        }

    def on_event(self, event: EventBase) -> None:
        """A log listener: progress, and what the run waits on now."""
        if event.type in QUIET:
            return
        doing = doing_after(event)
        if doing != self.record["doing"]:
            self.record.update(doing=doing, since=event.ts)
        self.record.update(
            session=event.session, turn=event.turn, last_event=event.ts, last_event_type=event.type
        )
        if (
            self.written_at is None
            or self.ticks() - self.written_at >= self.min_gap_secs
            or event.type == "run_end"
        ):
            self.beat()

    def beat(self) -> None:
        """Rewrite the file with the time now; a failed write is not the run's failure."""
        self.written_at = self.ticks()
        self.record["beat"] = self.now()
        try:
            directory = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                replace_in(
                    directory, self.path.name, json.dumps(self.record).encode(), durable=False
                )
            finally:
                os.close(directory)
        except OSError:
            pass

    async def keep_beating(self, interval_secs: float) -> None:
        """Beat every `interval_secs` until cancelled."""
        while True:
            self.beat()
            await asyncio.sleep(interval_secs)


def read_heartbeat(state_dir: Path) -> dict[str, Any] | None:
    """The heartbeat file's record, or None when there is none, it cannot be read, or it is
    not one (a link, a FIFO, a device or a file too big are never read through)."""
    try:
        record = json.loads(read_regular(state_dir / HEARTBEAT_FILE, MAX_HEARTBEAT_BYTES))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None
