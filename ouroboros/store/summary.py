"""The one fold of a run's events: `RunSummary`, which `status`, `status --json`, the dashboard
(`run`, `watch`), `stats`, the metrics and the manifest all read, so a figure a person sees for
one event is the same on every screen.

One method per event type (`FOLDS`) folds a record in. The summary holds what the run is
(its id, model, thresholds, remembered flags), where it stands (session, turn, the window
and how full it is), its counters (turns, restarts, masking, alerts, retries, tool calls),
the newest record of each anchor type, and the figures of its sessions (the first FIRST_KEPT
and the last RECENT_KEPT, the totals of the others) with the context chart's readings folded
into at most CHART_BUCKETS buckets (each the highest of `span` readings; `span` doubles when
they are full). A session's peak is the highest share of the budget its events report: its
prompts' readings, its wind-down's and that of the restart that ended it. Its size does not
grow with the records folded into it, unless `keep_all` asks for every session and reading
(`stats --all`).

Judgements the loop makes are fields of its events (`run_end.said_done`, the context use a
`session_restart` was decided at); a log written before a field was kept falls back once,
here.

    summary = RunSummary()
    summary.add_record(record)            # or add_event(event), add(kind, envelope, load)
    summary.context_pct, summary.turns, summary.restarts, summary.totals()
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Final

from ouroboros.protocols import JsonObject
from ouroboros.store.events import EventBase

FIRST_KEPT = 3
RECENT_KEPT = 12  # a run of at most this many sessions is shown whole
CHART_BUCKETS = 144  # twice the chart's width: a run of up to this many readings is exact
RESTART_PREFIX = "restart: "
RECENT_CHANGES = 8  # config changes kept whatever their key (`status` shows the newest few)
# The `run` flags a run remembers (in run_start, then run_resumed) and resume reuses; the turn
# limit only as `ouroboros run` was given it: a resume's `--max-turns N` is for it alone.
REMEMBERED_FLAGS: Final = ("agent.workspace", "model.name", "model.base_url", "agent.max_turns")
TURN_LIMIT: Final = "agent.max_turns"
# The records whose newest one a reader shows as it is (status, watch): kept whole.
ANCHORS = (
    "run_resumed",
    "session_start",
    "session_restart",
    "token_usage",
    "context_mask",
    "run_end",
    "stop_requested",
    "warning",
    "error",
    "context_truncation_detected",
    "context_overflow_recovered",
    "warning_cleared",
)
# How `next` said it before run_end had `said_done` (see how_to_continue).
SAID_DONE_BEFORE: Final = re.compile(r'^the agent said it is done \("(.*?)"\)')


def new_session(number: int) -> JsonObject:
    return {
        "session": number,
        "turns": 0,
        "peak_pct": None,
        "mask_rounds": 0,
        "masked": 0,
        "end": "running",
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cached_tokens": 0,
        "cache_prompt_tokens": 0,
    }


# A session's figures that add up (`totals`); the cache's two are missing from sessions folded
# before they were kept.
ADDED = (
    "turns",
    "mask_rounds",
    "masked",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "cache_prompt_tokens",
)


def cache_reading(r: JsonObject) -> tuple[int, int] | None:
    """(cached, prompt) of a `token_usage` record whose server said how much of the prompt its
    cache served, both in the server's tokens: the prompt is the cached and processed parts
    where both are given (llama.cpp), else the server's own count; None when it said nothing
    of its cache, or nothing to weigh it against.

        cache_reading({"cached_tokens": 78, "processed_tokens": 12})   # (78, 90)
    """
    cached, processed = r.get("cached_tokens"), r.get("processed_tokens")
    if cached is None:
        return None
    prompt = cached + processed if processed is not None else r.get("reported")
    if not prompt or prompt < cached:
        return None
    return cached, prompt


def cache_hit_pct(figures: JsonObject) -> float | None:
    """The share of the prompt tokens the server took from its cache, of the requests it said
    that of, as a percentage; None when it never said."""
    prompt = figures.get("cache_prompt_tokens") or 0
    return round(100 * figures.get("cached_tokens", 0) / prompt, 1) if prompt else None


def kept_changes(changes: list[JsonObject]) -> list[JsonObject]:
    """The config changes worth keeping, in order: the newest RECENT_CHANGES, and the newest
    change of every key (what the config is now, for a resume)."""
    newest = {change.get("key"): i for i, change in enumerate(changes)}
    keep = set(newest.values()) | set(range(len(changes) - RECENT_CHANGES, len(changes)))
    return [change for i, change in enumerate(changes) if i in keep]


def remembered(flags: JsonObject, before: JsonObject, *, first: bool) -> JsonObject:
    """A record's flags as the run remembers them: the turn limit only as `ouroboros run`
    gave it (`first`), else as remembered `before`."""
    limit = flags.get(TURN_LIMIT) if first else before.get(TURN_LIMIT)
    kept = {key: value for key, value in flags.items() if key != TURN_LIMIT}
    return kept if limit is None else {**kept, TURN_LIMIT: limit}


ENVELOPE = ("type", "ts", "seq", "session", "turn")


def envelope(record: JsonObject) -> JsonObject:
    """What every record says of itself: its type, time, place in the log and in the run."""
    return {k: record.get(k) for k in ENVELOPE}


def envelope_of(event: EventBase) -> JsonObject:
    """The envelope of an event as its model."""
    return {k: getattr(event, k) for k in ENVELOPE}


@dataclass
class RunSummary:
    """A run as its events tell it, folded one record at a time (see the module)."""

    # what the run is
    run_start: JsonObject | None = None
    run_id: str = ""
    model: str = ""  # model.name, as the run asks for it
    served_model: str = ""  # the one the server says answered, where that is another
    soft: float | None = None  # the thresholds the run uses (None: not said yet)
    hard: float | None = None
    flags: JsonObject = field(default_factory=dict)
    config_changes: list[JsonObject] = field(default_factory=list)
    anchors: dict[str, JsonObject] = field(default_factory=dict)
    started: str | None = None  # the first record's timestamp
    last: JsonObject = field(default_factory=dict)  # the newest record's envelope
    # where it stands
    session: int = 1
    turn: int = 0
    answered: list[int] = field(default_factory=lambda: [0, 0])  # the newest reply's turn
    window: int | None = None  # the window believed, in tokens
    limit_source: str = ""
    budget: int | None = None  # the prompt's share of it
    prompt_tokens: int | None = None  # the conversation now (None: a session not measured)
    context_pct: float | None = None  # of the budget
    prompt_pct: float | None = None  # the last prompt sent's share of the budget
    said_done: str = ""  # the words of an idle end in which the agent said it was done
    ended_by: str | None = None  # the run_end's reason, unless it went on after it
    # its counters (`run_resumed` and `run_end` say the run's totals; others add to them)
    turns: int = 0
    assistants: int = 0  # `assistant` records folded, as `resume` counts turns taken
    restarts: int = 0
    masked: int = 0  # by masking rounds, and by fitting the carryover into a restart
    mask_rounds: int = 0
    alerts: int = 0
    retries: int = 0
    tool_calls: dict[str, int] = field(default_factory=dict)  # by "tool outcome"
    # its sessions (`stats`)
    sessions: int = 0  # how many in all
    first: list[JsonObject] = field(default_factory=list)  # those that left `recent` first
    recent: list[JsonObject] = field(default_factory=list)
    earlier: JsonObject = field(default_factory=lambda: new_session(0))  # totals of the rest
    session_restarts: int = 0  # `session_restart` records folded
    readings: int = 0
    span: int = 1
    buckets: list[list[Any]] = field(default_factory=list)  # [pct, soft, hard, restart, n]
    restart_next: bool = False  # the next reading is the first of a restarted session
    keep_all: bool = False  # every session and reading (`stats --all`)
    complete: bool = True  # False: read from a manifest kept before the sessions' figures

    def add(self, kind: str, head: JsonObject, load: Callable[[], JsonObject]) -> None:
        """Fold in one record: its type, envelope and (read only when needed) the record."""
        if self.started is None:
            self.started = head.get("ts")
        self.last = head
        self.session, self.turn = int(head.get("session") or 1), int(head.get("turn") or 0)
        current = self._session(self.session)
        if kind == "assistant":  # a turn counts once its reply came
            self.turns += 1
            self.assistants += 1
            self.answered = [self.session, self.turn]
            if current is not None:
                current["turns"] += 1
        elif (fold := FOLDS.get(kind)) is not None:
            record = load()
            if kind in ANCHORS:
                self.anchors[kind] = record
            fold(self, record, current)

    def add_record(self, record: JsonObject) -> None:
        self.add(str(record.get("type", "")), envelope(record), lambda: record)

    def add_event(self, event: EventBase) -> None:
        """Fold in an event as its model (a log's listener gets it so): its record made only
        when its fold reads it."""
        head = envelope_of(event)
        self.add(event.type, head, event.record)

    # -- one fold per event type --

    def _run_start(self, r: JsonObject, current: JsonObject | None) -> None:
        self.run_start, self.run_id = r, r.get("run_id", "")
        config = r.get("config") or {}
        context, model = config.get("context") or {}, config.get("model") or {}
        self.soft = context.get("soft_threshold_pct", self.soft)
        self.hard = context.get("hard_threshold_pct", self.hard)
        self.model = model.get("name", self.model)
        if "flags" in r:
            self.flags = remembered(r["flags"], self.flags, first=True)

    def _run_resumed(self, r: JsonObject, current: JsonObject | None) -> None:
        if "flags" in r:
            self.flags = remembered(r["flags"], self.flags, first=False)
        self.turns, self.restarts = r.get("total_turns", 0), r.get("restarts", 0)
        self.window, self.limit_source = (
            r.get("context_limit", self.window),
            r.get("limit_source", self.limit_source),
        )
        self.ended_by, self.said_done = None, ""  # it goes on again: the end it had is over
        if current is not None:
            current["end"] = "running"

    def _config_changed(self, r: JsonObject, current: JsonObject | None) -> None:
        self.config_changes = kept_changes([*self.config_changes, r])
        if r.get("key") == "context.soft_threshold_pct":
            self.soft = r.get("new")
        elif r.get("key") == "context.hard_threshold_pct":
            self.hard = r.get("new")

    def _session_start(self, r: JsonObject, current: JsonObject | None) -> None:
        self.window, self.budget = r.get("context_limit"), r.get("budget")
        self.limit_source = r.get("limit_source", "")
        self.prompt_tokens = self.context_pct = None

    def _new_window(self, r: JsonObject, current: JsonObject | None) -> None:
        """A smaller window is believed from now on, and why."""
        self.window, self.limit_source = r.get("new_limit"), r.get("limit_source", "")

    def _token_usage(self, r: JsonObject, current: JsonObject | None) -> None:
        pct = float(r.get("context_used_pct", 0.0))
        self.answered = [self.session, self.turn]  # it follows its turn's reply
        self.served_model = r.get("served_model", "")
        self.prompt_tokens, self.context_pct = r.get("prompt_tokens"), pct
        self.prompt_pct = pct
        self.window, self.budget = r.get("context_limit", self.window), r.get("budget")
        if current is not None:
            current["peak_pct"] = max(current["peak_pct"] or 0.0, pct)
            current["prompt_tokens"] += r.get("prompt_tokens", 0)
            current["completion_tokens"] += r.get("completion_tokens", 0)
            if (cache := cache_reading(r)) is not None:
                current["cached_tokens"] = current.get("cached_tokens", 0) + cache[0]
                current["cache_prompt_tokens"] = current.get("cache_prompt_tokens", 0) + cache[1]
        self._reading(pct)

    def _context_mask(self, r: JsonObject, current: JsonObject | None) -> None:
        self.masked = r.get("total_masked", self.masked)
        self.mask_rounds += 1
        self.prompt_tokens = r.get("tokens_after")
        if self.budget and self.prompt_tokens is not None:
            self.context_pct = round(100 * self.prompt_tokens / self.budget, 1)
        if current is not None:
            current["mask_rounds"] += 1
            current["masked"] += r.get("observations_masked", 0)

    def _wind_down(self, r: JsonObject, current: JsonObject | None) -> None:
        if current is not None:
            peak(current, r.get("context_used_pct"))

    def _session_restart(self, r: JsonObject, current: JsonObject | None) -> None:
        self.restarts += 1
        self.session_restarts += 1
        self.masked += r.get("carryover_masked", 0)
        self.prompt_tokens = self.context_pct = None
        self.restart_next = True
        if current is not None:
            current["masked"] += r.get("carryover_masked", 0)
        previous = [s for s in self.recent if s["session"] == self.session - 1]
        if previous:
            previous[0]["end"] = RESTART_PREFIX + str(r.get("reason", ""))
            peak(previous[0], r.get("context_used_pct"))  # None in a log from before it

    def _session_end(self, r: JsonObject, current: JsonObject | None) -> None:
        if current is not None and r.get("reason") != "restart":
            current["end"] = r.get("reason")

    def _run_end(self, r: JsonObject, current: JsonObject | None) -> None:
        self.turns, self.restarts = r.get("total_turns", 0), r.get("restarts", 0)
        self.ended_by = r.get("reason")
        said = r.get("said_done")
        if said is None:  # a log from before run_end said it: `next` did, in words
            said = m.group(1) if (m := SAID_DONE_BEFORE.match(r.get("next", ""))) else ""
        self.said_done = said

    def _alert(self, r: JsonObject, current: JsonObject | None) -> None:
        self.alerts += 1

    def _tool_result(self, r: JsonObject, current: JsonObject | None) -> None:
        outcome = "interrupted" if r.get("interrupted") else "ok" if r.get("ok") else "error"
        key = f"{r.get('name', '')} {outcome}"
        self.tool_calls[key] = self.tool_calls.get(key, 0) + 1

    def _retry(self, r: JsonObject, current: JsonObject | None) -> None:
        self.retries += 1

    def _kept(self, r: JsonObject, current: JsonObject | None) -> None:
        """An anchor kept as it is, for the reader to show."""

    # -- the sessions and the chart --

    def _session(self, number: int) -> JsonObject | None:
        for session in reversed(self.recent):
            if session["session"] == number:
                return session
        if self.recent and number < self.recent[-1]["session"]:
            return None  # older than every session kept (not in a log written in order)
        self.recent.append(new_session(number))
        self.sessions += 1
        if len(self.recent) > RECENT_KEPT and not self.keep_all:
            gone = self.recent.pop(0)
            if len(self.first) < FIRST_KEPT:
                self.first.append(gone)
            add_totals(self.earlier, gone)
        return self.recent[-1]

    def _reading(self, pct: float) -> None:
        self.readings += 1
        last = self.buckets[-1] if self.buckets else None
        if last is not None and last[4] < self.span:
            last[0], last[1], last[2] = max(last[0], pct), self.soft, self.hard
            last[3], last[4] = last[3] or self.restart_next, last[4] + 1
        else:
            self.buckets.append([pct, self.soft, self.hard, self.restart_next, 1])
        self.restart_next = False
        if len(self.buckets) > CHART_BUCKETS and not self.keep_all:
            self.span *= 2
            pairs = zip(self.buckets[0::2], self.buckets[1::2] + [None])
            self.buckets = [merged(a, b) for a, b in pairs]

    # -- what readers ask --

    @property
    def end(self) -> JsonObject | None:
        """The run_end record, unless the run was resumed (or went on) after it."""
        end = self.anchors.get("run_end")
        resumed = self.anchors.get("run_resumed")
        if end is None or (resumed is not None and resumed["seq"] > end["seq"]):
            return None
        return end

    def anchor_records(self) -> list[JsonObject]:
        """The first record, the config changes kept and the newest of each anchor type, in
        the order written."""
        records = [self.run_start] if self.run_start else []
        records += self.config_changes
        records += self.anchors.values()
        return sorted(records, key=lambda r: r.get("seq", 0))

    def shown(self) -> tuple[list[JsonObject], int]:
        """The sessions the default view lists, and how many it leaves out."""
        if self.keep_all or self.sessions <= RECENT_KEPT:
            return self.recent, 0
        return (self.first + self.recent)[:FIRST_KEPT] + self.recent[
            -FIRST_KEPT:
        ], self.sessions - 2 * FIRST_KEPT

    def totals(self) -> JsonObject:
        """Every session's figures added up (turns, masking, tokens; the highest peak)."""
        total = new_session(0) | self.earlier
        for session in self.recent:
            add_totals(total, session)
        return total

    @property
    def cache_hit_pct(self) -> float | None:
        """The run's share of prompt tokens served from the server's cache (`cache_hit_pct`)."""
        return cache_hit_pct(self.totals())

    def with_sessions_of(self, other: RunSummary) -> None:
        """Take the sessions' figures of `other`, a fold of the same records."""
        for name in SESSION_FIELDS:
            setattr(self, name, getattr(other, name))
        self.complete = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSummary:
        """The summary a manifest holds (a fresh one for an empty state). One kept before
        this summary (a tally, its sessions' figures under `figures`, or none) is read as it
        would have been folded: its anchors folded again for where the run stands."""
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if not data or "answered" in data:
            return cls(**known)
        figures = data.get("figures")
        if isinstance(figures, dict):
            moved = {"end": "ended_by", "restarts": "session_restarts"}
            known.update(
                {
                    moved.get(k, k): v
                    for k, v in figures.items()
                    if moved.get(k, k) in SESSION_FIELDS + ("ended_by",)
                }
            )
        summary = cls(**known, complete=isinstance(figures, dict))
        standing = cls()
        for record in summary.anchor_records():
            standing.add_record(record)
        for name in STANDING_FIELDS:
            setattr(summary, name, getattr(standing, name))
        if summary.last:
            summary.session, summary.turn = summary.last["session"], summary.last["turn"]
        return summary


def peak(session: JsonObject, pct: float | None) -> None:
    if pct is not None:
        session["peak_pct"] = max(session["peak_pct"] or 0.0, float(pct))


def add_totals(total: JsonObject, session: JsonObject) -> None:
    for key in ADDED:
        total[key] = total.get(key, 0) + session.get(key, 0)
    if session["peak_pct"] is not None:
        total["peak_pct"] = max(total["peak_pct"] or 0.0, session["peak_pct"])


def merged(a: list[Any], b: list[Any] | None) -> list[Any]:
    if b is None:
        return a
    return [max(a[0], b[0]), b[1], b[2], a[3] or b[3], a[4] + b[4]]


Fold = Callable[[RunSummary, JsonObject, Any], None]
FOLDS: dict[str, Fold] = {
    "run_start": RunSummary._run_start,
    "run_resumed": RunSummary._run_resumed,
    "config_changed": RunSummary._config_changed,
    "session_start": RunSummary._session_start,
    "context_truncation_detected": RunSummary._new_window,
    "context_overflow_recovered": RunSummary._new_window,
    "token_usage": RunSummary._token_usage,
    "context_mask": RunSummary._context_mask,
    "wind_down": RunSummary._wind_down,
    "session_restart": RunSummary._session_restart,
    "session_end": RunSummary._session_end,
    "run_end": RunSummary._run_end,
    "warning": RunSummary._alert,
    "error": RunSummary._alert,
    "tool_result": RunSummary._tool_result,
    "retry": RunSummary._retry,
    "stop_requested": RunSummary._kept,
    "warning_cleared": RunSummary._kept,
}
"""The fold of each event type the summary reads (`assistant` is counted without its record;
every other type changes only `last`, `session` and `turn`)."""

SESSION_FIELDS = (
    "sessions",
    "first",
    "recent",
    "earlier",
    "session_restarts",
    "readings",
    "span",
    "buckets",
    "restart_next",
)
STANDING_FIELDS = (
    "run_id",
    "model",
    "served_model",
    "soft",
    "hard",
    "window",
    "limit_source",
    "budget",
    "prompt_tokens",
    "context_pct",
    "prompt_pct",
    "said_done",
    "answered",
)
