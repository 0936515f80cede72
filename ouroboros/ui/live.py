"""The live dashboard on a terminal: a rich Live display of a DashboardState.

It is fed from outside, by the run's hooks (`ouroboros run`) or by tailing a log
(`ouroboros watch`); it never drives the run. The display refreshes in rich's own thread, so
the state is only touched under a lock.

    dashboard = LiveDashboard(DashboardState(soft=0.7, hard=0.9))
    hooks = dashboard.hooks()          # for run_agent: events, streamed text, confirmations
    watch(run_dir / "events.jsonl", DashboardState())   # a run going on in another process
"""

from __future__ import annotations

import atexit
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, TextIO

from rich.console import Console, RenderableType
from rich.live import Live

from ouroboros.runner import RunHooks
from ouroboros.ui.dashboard import DashboardState
from ouroboros.ui.follow import follow_events
from ouroboros.ui.render import render

REFRESH_PER_SECOND = 8


class LiveDashboard:
    """Shows the state live from the first event it is given until the run_end event."""

    def __init__(self, state: DashboardState, console: Console | None = None, *,
                 stop_at_run_end: bool = True) -> None:
        self.state = state
        self.console = console or Console()
        self.stop_at_run_end = stop_at_run_end
        self._lock = threading.Lock()
        self._live = Live(get_renderable=self.renderable, console=self.console,
                          refresh_per_second=REFRESH_PER_SECOND)
        self._showing = False
        atexit.register(self.stop)  # a crash must not leave the cursor hidden

    def renderable(self) -> RenderableType:
        with self._lock:
            return render(self.state)

    def on_event(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.state.apply(event)
        if event["type"] == "run_end" and self.stop_at_run_end:
            self.stop()
        else:
            self.start()

    def on_text(self, piece: str) -> None:
        with self._lock:
            self.state.add_text(piece, time.monotonic())

    def start(self) -> None:
        if not self._showing:
            self._showing = True
            self._live.start(refresh=True)

    def stop(self) -> None:
        """Stop refreshing, leaving the last frame on the screen."""
        if self._showing:
            self._showing = False
            self._live.stop()
            if not self.console.is_terminal:  # rich ends the last frame's line only on one
                self.console.line()

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
                f"Context full ({reason}). Restart the session? [Y/n] ", markup=False,
                stream=stream)
        return answer.strip().lower() in ("", "y", "yes")

    def hooks(self, input_stream: TextIO | None = None) -> RunHooks:
        """RunHooks for run_agent; `input_stream` answers confirmations (default: stdin)."""
        return RunHooks(on_event=self.on_event, on_text=self.on_text,
                        confirm_restart=lambda reason: self.confirm_restart(reason, input_stream))


def live_hooks(soft: float | None = None, hard: float | None = None,
               console: Console | None = None) -> RunHooks:
    """The dashboard's hooks; thresholds as fractions (a run_start event also sets them)."""
    given = {"soft": soft, "hard": hard}
    state = DashboardState(**{name: value for name, value in given.items() if value is not None})
    return LiveDashboard(state, console).hooks()


def watch(path: Path, state: DashboardState, console: Console | None = None,
          wait: Callable[[], None] | None = None) -> DashboardState:
    """Show a run that another process is writing to `path`: replay its log, then follow it
    until its run_end (Ctrl+C raises KeyboardInterrupt as usual). Returns the final state."""
    dashboard = LiveDashboard(state, console, stop_at_run_end=False)
    try:
        for event in follow_events(path, wait):
            dashboard.on_event(event)
    finally:
        dashboard.stop()
    return state
