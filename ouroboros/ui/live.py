"""The live dashboard on a terminal: a rich Live display of a DashboardState.

It is fed from outside, by the run's hooks (`ouroboros run`) or by tailing a log
(`ouroboros watch`); it never drives the run. A thread of its own redraws the frame, fitted
to the terminal's size, at most REFRESH_PER_SECOND times a second and only when the state or
the size changed, so the state is only touched under a lock.

    dashboard = LiveDashboard(DashboardState(soft=0.7, hard=0.9))
    hooks = dashboard.hooks()          # for run_agent: events, streamed text, confirmations
    watch(run_dir / "events.jsonl", DashboardState())   # a run going on in another process
"""

from __future__ import annotations

import atexit
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, TextIO

from rich.console import Console, RenderableType
from rich.live import Live

from ouroboros.errors import StateError
from ouroboros.protocols import RunHooks
from ouroboros.store.events import EventLike, parse_event
from ouroboros.store.log import EVENTS_FILE, read_tail
from ouroboros.store.segments import load_manifest
from ouroboros.store.summary import RunSummary
from ouroboros.ui.dashboard import DashboardState
from ouroboros.ui.follow import follow_events
from ouroboros.ui.render import render
from ouroboros.ui.status import seeded

REFRESH_PER_SECOND = 8
SPARE_LINES = 1  # the frame stays one line short of the terminal, so the final newline
# after it scrolls nothing off the top


class LiveDashboard:
    """Shows the state live from the first event it is given until the run_end event."""

    def __init__(
        self,
        state: DashboardState,
        console: Console | None = None,
        *,
        stop_at_run_end: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.state = state
        self.clock = clock  # wall-clock seconds: a waiting run's count moves on with them
        self.console = console or Console()
        self.stop_at_run_end = stop_at_run_end
        self._lock = threading.Lock()
        self._showing = False
        self._changes = 0  # bumped by every change to the state
        self._drawn: tuple[int, tuple[int, int], int | None] | None = None  # changes, size, tick
        self._stop_redrawing = threading.Event()
        self._redrawer: threading.Thread | None = None
        self._live = Live(get_renderable=self.renderable, console=self.console, auto_refresh=False)
        atexit.register(self.stop)  # a crash must not leave the cursor hidden

    def renderable(self) -> RenderableType:
        width, height = self.console.size
        with self._lock:
            self._drawn = (self._changes, (width, height), self._tick())
            return render(
                self.state,
                width,
                max(height - SPARE_LINES, 1),
                now=datetime.fromtimestamp(self.clock(), timezone.utc),
            )

    def _tick(self) -> int | None:
        """The second a waiting run's frame counts its wait in (a new one redraws it)."""
        return int(self.clock()) if self.state.waiting() is not None else None

    def on_event(self, record: EventLike) -> None:
        event = parse_event(record)
        with self._lock:
            self.state.apply(event)
            self._changes += 1
        if event.type == "run_end" and self.stop_at_run_end:
            self.stop()
        else:
            self.start()

    def on_text(self, piece: str) -> None:
        with self._lock:
            self.state.add_text(piece, time.monotonic())
            self._changes += 1

    def start(self) -> None:
        if not self._showing:
            self._showing = True
            self._live.start(refresh=True)
            self._stop_redrawing.clear()
            self._redrawer = threading.Thread(
                target=self._redraw_changes, daemon=True, name="dashboard-redraw"
            )
            self._redrawer.start()

    def stop(self) -> None:
        """Stop refreshing, leaving the last frame on the screen."""
        if self._showing:
            self._showing = False
            self._stop_redrawing.set()
            if self._redrawer is not None and self._redrawer is not threading.current_thread():
                self._redrawer.join()
            self._live.stop()
            if not self.console.is_terminal:  # rich ends the last frame's line only on one
                self.console.line()

    def stale(self) -> bool:
        """Whether the state or the terminal's size changed since the last frame was drawn."""
        size = tuple(self.console.size)
        with self._lock:
            return self._drawn != (self._changes, size, self._tick())

    def _redraw_changes(self) -> None:
        while not self._stop_redrawing.wait(1 / REFRESH_PER_SECOND):
            if self.stale():
                self._live.refresh()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Hand the terminal back for a question, then resume the display."""
        showing = self._showing
        self.stop()
        try:
            yield
        finally:
            if showing:
                self.start()

    def confirm_restart(self, reason: str, stream: TextIO | None = None) -> bool:
        with self.paused():
            answer = self.console.input(
                f"Context full ({reason}). Restart the session? [Y/n] ", markup=False, stream=stream
            )
        return answer.strip().lower() in ("", "y", "yes")

    def hooks(self, input_stream: TextIO | None = None) -> RunHooks:
        """RunHooks for run_agent; `input_stream` answers confirmations (default: stdin)."""
        return RunHooks(
            on_event=self.on_event,
            on_text=self.on_text,
            confirm_restart=lambda reason: self.confirm_restart(reason, input_stream),
        )


def live_hooks(
    soft: float | None = None,
    hard: float | None = None,
    console: Console | None = None,
    past: Path | None = None,
) -> RunHooks:
    """The dashboard's hooks; thresholds as fractions (a run_start event also sets them).
    `past`: the log of the run a resume continues, replayed first, so the dashboard shows
    the same header (run id, model, counters) as it did while the run went on."""
    given = {"soft": soft, "hard": hard}
    state = DashboardState(**{name: value for name, value in given.items() if value is not None})
    if past is not None:
        state = resumed_state(state, log_paths(past)[0])
    return LiveDashboard(state, console).hooks()


def resumed_state(state: DashboardState, run_dir: Path) -> DashboardState:
    """`state` caught up with a run a resume continues: its manifest's summary and its current
    segment (none, after a crash at a rollover). A log that cannot be read shows as a new
    run: the resume itself says what is wrong with it."""
    try:
        tail = read_tail(run_dir)
    except (StateError, OSError):
        return state
    summary = tail.manifest.summary()
    state = seed(state, summary) if summary.last else state
    for record in tail.records:
        state.apply(parse_event(record))
    return state


def log_paths(path: Path) -> tuple[Path, Path]:
    """A run's directory and its current segment, from either."""
    return (path, path / EVENTS_FILE) if path.is_dir() else (path.parent, path)


def caught_up(state: DashboardState, run_dir: Path) -> DashboardState:
    """`state` as of the run's closed segments, from its manifest's summary (not its history);
    the current segment is for the caller to replay."""
    summary = load_manifest(run_dir).summary()
    return seed(state, summary) if summary.last else state


def watch(
    path: Path,
    state: DashboardState,
    console: Console | None = None,
    wait: Callable[[], None] | None = None,
) -> DashboardState:
    """Show a run that another process is writing (`path`: its directory, or its
    events.jsonl): start from its manifest's summary (not its history), replay its current
    segment, then follow it until its run_end (Ctrl+C raises KeyboardInterrupt as usual).
    Returns the final state."""
    run_dir, current = log_paths(path)
    state = caught_up(state, run_dir)
    dashboard = LiveDashboard(state, console, stop_at_run_end=False)
    try:
        for event in follow_events(current, wait):
            dashboard.on_event(event)
    finally:
        dashboard.stop()
    return state


def seed(state: DashboardState, summary: RunSummary) -> DashboardState:
    """`state` as of the records the summary has folded (see status.seeded)."""
    seeded_state = seeded(summary)
    for name in ("max_tools", "max_notes"):
        setattr(seeded_state, name, getattr(state, name))
    return seeded_state
