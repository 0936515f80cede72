"""What the live dashboard knows about a run, built from its events.

`DashboardState.apply(event)` is a reducer: it folds one event into the run's summary
(store/summary.py, the one fold every reader shares: its numbers are the dashboard's) and
into what only a screen shows (the streamed text, the tool lines, the activity list, the
alert, the rates), and does no I/O. The same state serves `ouroboros run` (fed by the event
log's listeners), `ouroboros watch` (fed by tailing events.jsonl) and `ouroboros status`
(seeded from the summary the manifest keeps).

    state = DashboardState()
    for event in read_log(path):
        state.apply(event)
    state.context_pct, state.restarts, state.masked

The newest `warning` or `error` stays in `state.alert` until a newer one replaces it, so a
warning emitted before the first redraw is still on the screen an hour later, or until its
cause is over: a `warning_cleared` with the warning's `condition` takes it down (and brings
back the newest warning whose cause still holds); a resume takes down the error that ended
the run.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Iterable, Literal

from ouroboros.config import ContextConfig
from ouroboros.store import events as ev
from ouroboros.store.events import EventBase, EventLike, UnknownEvent, parse_event
from ouroboros.store.summary import RunSummary
from ouroboros.ui.plain import BOOKKEEPING, describe, one_line
from ouroboros.ui.sanitize import neutralise, neutralise_all
from ouroboros.window.ledger import DEFAULT_CHARS_PER_TOKEN

Level = Literal["info", "warn", "error"]
Zone = Literal["green", "yellow", "red"]

MIN_RATE_SECS = 0.5  # a streamed rate over less time than this is noise
RATE_WINDOW_SECS = 10.0  # ~tok/s is the rate over this much of the newest streaming
MIN_REPLY_SECS = 0.05  # a reply timed by its events' timestamps (ms) over less is noise
MAX_TEXT_CHARS = 4000  # the tail of the streamed text kept for display

NOTE_LEVELS: dict[str, Level] = {
    "run_start": "info",
    "run_resumed": "info",
    "context_mask": "info",
    "context_drop": "warn",
    "wind_down": "warn",
    "session_restart": "info",
    "context_truncation_detected": "warn",
    "context_overflow_recovered": "warn",
    "retry": "warn",
    "security": "warn",
    "warning": "warn",
    "error": "error",
    "stop_requested": "info",
    "run_end": "info",
    "reload_requested": "info",
    "config_changed": "info",
    "idle": "info",
    "prompt_changed": "info",
    "warning_cleared": "info",
}
"""The events worth a line in the dashboard's activity list, and how loudly."""


_DEFAULTS = ContextConfig()


@dataclass
class ToolLine:
    """One tool call and, once it is back, its result in one line."""

    id: str
    clock: str
    call: str
    result: str | None = None  # "ok: <first line>" or "FAILED: ..."
    size: str = ""  # "6.1 kB"
    duration_ms: int = 0
    truncated: bool = False
    ok: bool | None = None


@dataclass
class Note:
    """One line of the activity list: masking, wind-down, restarts, retries, problems."""

    clock: str
    text: str
    level: Level
    kind: str = ""  # the event type it says
    short: str = ""  # what it says in one row where it has only one (a restart: its reason)


def parse_ts(ts: str) -> datetime:
    return datetime.fromisoformat(ts)


def zone(pct: float, soft: float, hard: float) -> Zone:
    """The colour of a context reading: `pct` in percent, thresholds as fractions."""
    if pct >= 100 * hard:
        return "red"
    if pct >= 100 * soft:
        return "yellow"
    return "green"


@dataclass
class DashboardState:
    """The dashboard's view of one run: its summary, and what a screen adds. Thresholds are
    fractions of the prompt budget, as in ouroboros.toml; the run's own (in its summary)
    replace the ones given."""

    soft: float = _DEFAULTS.soft_threshold_pct
    hard: float = _DEFAULTS.hard_threshold_pct
    max_tools: int = 20  # kept; the layout shows as many as the terminal has room for
    max_notes: int = 20
    summary: RunSummary = field(default_factory=RunSummary)

    status: str = "starting"
    ended: bool = False
    text: str = ""
    streaming: bool = False
    tokens_per_sec: float | None = None
    last_type: str | None = None
    last_ts: str | None = None
    tools: deque[ToolLine] = field(default_factory=deque)
    notes: deque[Note] = field(default_factory=deque)
    alert: Note | None = None  # the newest warning or error whose cause is not known over
    conditions: dict[str, Note] = field(default_factory=dict)  # warnings not over, by cause
    _stream_chars: int = field(default=0, init=False, repr=False)
    # (seconds of streaming, characters) per streamed piece: the pauses between replies cut out
    _pieces: deque[tuple[float, int]] = field(default_factory=deque, init=False, repr=False)
    _paused_secs: float = field(default=0.0, init=False, repr=False)
    _chars_per_token: float = field(default=DEFAULT_CHARS_PER_TOKEN, init=False, repr=False)
    # (seconds, completion tokens) of the newest replies, as their events' timestamps time them
    _replies: deque[tuple[float, int]] = field(
        default_factory=lambda: deque(maxlen=64), init=False, repr=False
    )
    _streamed_turn: bool = field(default=False, init=False, repr=False)
    _reply_secs: float | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._thresholds()

    # -- the run's numbers, as its summary has them (its words with control characters made
    # -- visible, as the screen shows every string of an event)

    run_id = property(lambda self: neutralise(self.summary.run_id))
    model = property(lambda self: neutralise(self.summary.model))
    served_model = property(lambda self: neutralise(self.summary.served_model))
    session = property(lambda self: self.summary.session)
    turn = property(lambda self: self.summary.turn)
    total_turns = property(lambda self: self.summary.turns)
    restarts = property(lambda self: self.summary.restarts)
    masked = property(lambda self: self.summary.masked)
    alerts = property(lambda self: self.summary.alerts)
    context_limit = property(lambda self: self.summary.window)
    cache_hit_pct = property(lambda self: self.summary.cache_hit_pct)
    limit_source = property(lambda self: neutralise(self.summary.limit_source))
    budget = property(lambda self: self.summary.budget)
    prompt_tokens = property(lambda self: self.summary.prompt_tokens)
    context_pct = property(lambda self: self.summary.context_pct)

    def counted_turns(self) -> tuple[int, int]:
        """(turns of this session, turns in all), both counting the replies received, so the
        two agree: a turn begun but not yet answered (its events carry its number while the
        model is asked) is in neither."""
        unanswered = self.unanswered_turn()
        return (self.turn if unanswered is None else self.turn - 1), self.total_turns

    def unanswered_turn(self) -> int | None:
        """The turn of this session whose request went out with no reply yet (the model still
        asked, or the run stopped before it came), or None: every turn begun is answered."""
        answered = self.turn == 0 or self.summary.answered == [self.session, self.turn]
        return None if answered else self.turn

    @property
    def zone(self) -> Zone:
        return zone(self.context_pct or 0.0, self.soft, self.hard)

    def waiting(self) -> tuple[str, str] | None:
        """What the run waits on while nothing streams, and since when (an event's `ts`): a
        tool still running, a retry's backoff, an idle pause, or the model (a first token
        can take a minute while a model loads); None when it waits on nothing."""
        if self.ended or self.streaming or self.status != "running" or not self.last_ts:
            return None
        running = self.tools[-1] if self.tools and self.tools[-1].result is None else None
        if running is not None:
            return f"running {running.call.split(' ')[0]}", self.last_ts
        if self.last_type == "retry":
            return "waiting to retry", self.last_ts
        if self.last_type == "idle":
            return "idle pause", self.last_ts
        return "waiting for the model", self.last_ts

    def apply(self, e: EventLike | EventBase) -> DashboardState:
        """Fold one event into the summary and the screen's state; returns the state, for
        chaining."""
        event = parse_event(e)
        if isinstance(e, dict):
            self.summary.add_record(e)
        else:
            self.summary.add_event(event)
        self._thresholds()
        return self.show(event)

    def show(self, event: EventBase) -> DashboardState:
        """Fold one event into what only the screen shows (the summary has it already).
        Control characters in it are made visible first (ui/sanitize.py)."""
        if event.type in BOOKKEEPING:
            return self
        event = neutralised(event)
        handler = getattr(self, f"_on_{event.type}", None)
        if handler is not None and not isinstance(event, UnknownEvent):
            handler(event)
        if event.type in NOTE_LEVELS:
            self._note(event)
        self.last_type, self.last_ts = event.type, event.ts or self.last_ts
        return self

    def _thresholds(self) -> None:
        self.soft = self.summary.soft if self.summary.soft is not None else self.soft
        self.hard = self.summary.hard if self.summary.hard is not None else self.hard

    def add_text(self, piece: str, now: float) -> DashboardState:
        """A piece of the reply as it streams; `now` is a monotonic clock in seconds."""
        piece = neutralise(piece)
        counted = len(piece)
        if not self.streaming:
            if self._pieces:  # the time since the last stream is a pause, not streaming
                self._paused_secs = now - self._pieces[-1][0]
            self.streaming, self.text, self._stream_chars = True, "", 0
            self._streamed_turn = True
            counted = 0  # its characters came with the wait for the first token
        self.text = (self.text + piece)[-MAX_TEXT_CHARS:]
        self._stream_chars += len(piece)
        self._pieces.append((now - self._paused_secs, counted))
        while self._pieces[-1][0] - self._pieces[0][0] > RATE_WINDOW_SECS:
            self._pieces.popleft()
        self.tokens_per_sec = window_rate(self._pieces, RATE_WINDOW_SECS, self._chars_per_token)
        return self

    # -- one handler per event type that changes more than the clock --

    def _on_run_start(self, e: ev.RunStart) -> None:
        self.status = "running"

    def _on_run_resumed(self, e: ev.RunResumed) -> None:
        self.status, self.ended = "running", False
        if self.alert is not None and self.alert.level == "error":  # what failed the run
            self.alert = self._standing()  # is over: the resumed run goes on

    def _on_assistant(self, e: ev.Assistant) -> None:
        self.streaming, self.text = False, e.text
        if self.last_ts is not None and e.ts:
            self._reply_secs = (parse_ts(e.ts) - parse_ts(self.last_ts)).total_seconds()

    def _on_token_usage(self, e: ev.TokenUsage) -> None:
        if self._streamed_turn and e.completion_tokens and self._stream_chars:
            self._chars_per_token = self._stream_chars / e.completion_tokens
        if (
            e.completion_tokens
            and self._reply_secs is not None
            and self._reply_secs >= MIN_REPLY_SECS
        ):
            self._replies.append((self._reply_secs, e.completion_tokens))
        streamed = window_rate(self._pieces, RATE_WINDOW_SECS, self._chars_per_token)
        timed = replies_rate(self._replies, RATE_WINDOW_SECS)
        self.tokens_per_sec = streamed if streamed is not None else timed
        self._streamed_turn, self._reply_secs = False, None

    def _on_warning(self, e: ev.WarningEvent | ev.ErrorEvent) -> None:
        self.alert = Note(clock(e), describe(e) or e.type, NOTE_LEVELS[e.type], e.type)
        if isinstance(e, ev.WarningEvent) and e.condition:
            self.conditions.pop(e.condition, None)
            self.conditions[e.condition] = self.alert
            while len(self.conditions) > self.max_notes:
                del self.conditions[next(iter(self.conditions))]

    _on_error = _on_warning

    def _on_warning_cleared(self, e: ev.WarningCleared) -> None:
        """The warning's cause is over: it leaves the header, and the newest warning whose
        cause still holds, if any, comes back."""
        over = self.conditions.pop(e.condition, None)
        if over is not None and self.alert is over:
            self.alert = self._standing()

    def _standing(self) -> Note | None:
        """The newest warning whose cause is not over."""
        return next(reversed(self.conditions.values()), None)

    def _on_tool_call(self, e: ev.ToolCallEvent) -> None:
        summary = neutralise(call_summary(e.name, e.arguments, e.subject))  # JSON may hide an ESC
        self._add_tool(ToolLine(e.id, clock(e), summary))

    def _on_tool_result(self, e: ev.ToolResultEvent) -> None:
        line = next((t for t in reversed(self.tools) if t.id == e.id), None)
        if line is None:  # answered on resume, its call is in an earlier process's log
            line = self._add_tool(ToolLine(e.id, clock(e), f"{e.name}(...)"))
        line.ok = e.ok
        line.result = f"{'ok' if e.ok else 'FAILED'}: {one_line(e.summary, 80)}"
        line.size, line.duration_ms = size(e.bytes), e.duration_ms
        line.truncated = e.truncated

    def _on_stop_requested(self, e: ev.StopRequested) -> None:
        self.status = "stopping"

    def _on_run_end(self, e: ev.RunEnd) -> None:
        self.ended, self.streaming = True, False
        self.status = f"ended: {e.reason} (exit {e.exit_code})"
        if self.summary.said_done:  # done in words, not by task_complete
            self.status = f"ended: the agent says it is done; paused (exit {e.exit_code})"

    def _add_tool(self, line: ToolLine) -> ToolLine:
        self.tools.append(line)
        while len(self.tools) > self.max_tools:
            self.tools.popleft()
        return line

    def _note(self, e: EventBase) -> None:
        text = describe(e)
        if text is None:
            return
        short = f"restart: {e.reason}" if isinstance(e, ev.SessionRestart) else ""
        self.notes.append(Note(clock(e), text, NOTE_LEVELS[e.type], e.type, short))
        while len(self.notes) > self.max_notes:
            self.notes.popleft()


def window_rate(
    pieces: Iterable[tuple[float, int]], window_secs: float, chars_per_token: float
) -> float | None:
    """Tokens per second over the newest `window_secs` of streaming: `pieces` are (seconds of
    streaming, characters) per streamed piece, oldest first, with the pauses between replies
    cut out of the clock. The first piece in the window starts the clock, so its characters
    are not counted; None (shown blank) when nothing streamed, or too briefly to time.

        window_rate([(0.0, 4), (1.0, 40), (2.0, 40)], 10, 4.0)  # -> 10.0"""
    pieces = list(pieces)
    if not pieces:
        return None
    last = pieces[-1][0]
    inside = [(at, chars) for at, chars in pieces if at >= last - window_secs]
    span = last - inside[0][0]
    if span < MIN_RATE_SECS:
        return None
    return sum(chars for _, chars in inside[1:]) / chars_per_token / span


def replies_rate(replies: Iterable[tuple[float, int]], window_secs: float) -> float | None:
    """Tokens per second over the newest replies that took `window_secs` together (the
    newest one at least), for a log read without its streamed text (`watch`, `status`):
    `replies` are (seconds, completion tokens) per reply, oldest first, each timed by its
    events' timestamps (prompt processing included); None when no reply could be timed."""
    secs = tokens = 0.0
    for took, count in reversed(list(replies)):
        if secs and secs + took > window_secs:
            break
        secs, tokens = secs + took, tokens + count
    return tokens / secs if secs else None


def call_summary(name: str, arguments: str, subject: str = "") -> str:
    """A tool call by what it is about, as its tool named it (`file_read notes/todo.md`,
    `shell_exec pytest -q`, `recall obs-12`); in a log without that, by its first argument."""
    if subject:
        return f"{name} {one_line(subject, 200)}"
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        return f"{name} {one_line(arguments, 200)}".rstrip()
    if not isinstance(args, dict):
        return f"{name} {one_line(str(args), 200)}"
    value = next(iter(args.values()), "")
    return f"{name} {one_line(str(value), 200)}".rstrip()


def size(count: int) -> str:
    """A byte count as a person reads it: 512 B, 6.1 kB, 2.3 MB."""
    if count < 1000:
        return f"{count} B"
    if count < 1_000_000:
        return f"{count / 1000:.1f} kB"
    return f"{count / 1_000_000:.1f} MB"


def clock(e: EventBase) -> str:
    """The event's time of day, HH:MM:SS (UTC, as written)."""
    return e.ts[11:19]


def neutralised(event: EventBase) -> EventBase:
    """The event with every control character in its strings made visible (ui/sanitize.py);
    the event itself is left alone."""
    return parse_event(neutralise_all(event.model_dump()))
