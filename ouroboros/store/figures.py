"""What `ouroboros stats` shows by default, kept as the run goes, in a size that does not grow
with the run: the totals of every session, the first FIRST_KEPT sessions and the last
RECENT_KEPT, and the context chart's readings folded into at most CHART_BUCKETS buckets (each
the highest of `span` readings; `span` doubles when they are full).

The manifest's tally carries it (segments.Tally), so `stats` reads the manifest and the
current segment only. The rules are those of ui/stats.run_stats, which `stats --all` folds
over the whole log, streamed.

    figures = RunFigures()
    figures.add(kind, envelope, record)   # record: the whole record for the kinds in NEEDED
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

Record = dict[str, Any]
FIRST_KEPT = 3
RECENT_KEPT = 12  # a run of at most this many sessions is shown whole
CHART_BUCKETS = 144  # twice the chart's width: a run of up to this many readings is exact
RESTART_PREFIX = "restart: "
NEEDED = ("run_start", "token_usage", "config_changed", "context_mask", "session_restart",
          "session_end", "run_end", "run_resumed")


def new_session(number: int) -> Record:
    return {"session": number, "turns": 0, "peak_pct": None, "mask_rounds": 0, "masked": 0,
            "end": "running", "prompt_tokens": 0, "completion_tokens": 0}


@dataclass
class RunFigures:
    run_id: str = ""
    soft: float | None = None  # the thresholds the run used (None: not said yet)
    hard: float | None = None
    window: int | None = None  # the window and the prompt budget of the newest reading
    budget: int | None = None
    end: str | None = None
    sessions: int = 0  # how many in all
    first: list[Record] = field(default_factory=list)  # those that left `recent` first
    recent: list[Record] = field(default_factory=list)
    earlier: Record = field(default_factory=lambda: new_session(0))  # totals of the rest
    readings: int = 0
    restarts: int = 0
    span: int = 1
    buckets: list[list[Any]] = field(default_factory=list)  # [pct, soft, hard, restart, n]
    restart_next: bool = False  # the next reading is the first of a restarted session

    def add(self, kind: str, envelope: Record, record: Record | None) -> None:
        current = self._session(int(envelope.get("session") or 1))
        if current is not None and kind == "assistant":  # a turn counts once its reply came
            current["turns"] += 1
        if record is not None:
            self._fold(kind, record, current)

    def _session(self, number: int) -> Record | None:
        for session in reversed(self.recent):
            if session["session"] == number:
                return session
        if self.recent and number < self.recent[-1]["session"]:
            return None  # older than every session kept (not in a log written in order)
        self.recent.append(new_session(number))
        self.sessions += 1
        if len(self.recent) > RECENT_KEPT:
            gone = self.recent.pop(0)
            if len(self.first) < FIRST_KEPT:
                self.first.append(gone)
            add_totals(self.earlier, gone)
        return self.recent[-1]

    def _fold(self, kind: str, record: Record, current: Record | None) -> None:
        if kind == "run_start":
            self.run_id = record.get("run_id", "")
            context = (record.get("config") or {}).get("context") or {}
            self.soft = context.get("soft_threshold_pct", self.soft)
            self.hard = context.get("hard_threshold_pct", self.hard)
        elif kind == "config_changed" and record.get("key") == "context.soft_threshold_pct":
            self.soft = record.get("new")
        elif kind == "config_changed" and record.get("key") == "context.hard_threshold_pct":
            self.hard = record.get("new")
        elif kind == "run_end":
            self.end = record.get("reason")
        elif kind == "run_resumed":  # it goes on again: the end it had is over
            self.end = None
            if current is not None:
                current["end"] = "running"
        elif current is not None:
            self._session_fold(kind, record, current)

    def _session_fold(self, kind: str, record: Record, current: Record) -> None:
        if kind == "token_usage":
            pct = float(record.get("context_used_pct", 0.0))
            current["peak_pct"] = max(current["peak_pct"] or 0.0, pct)
            current["prompt_tokens"] += record.get("prompt_tokens", 0)
            current["completion_tokens"] += record.get("completion_tokens", 0)
            self.window = record.get("context_limit", self.window)
            self.budget = record.get("budget", self.budget)
            self._reading(pct)
        elif kind == "context_mask":
            current["mask_rounds"] += 1
            current["masked"] += record.get("observations_masked", 0)
        elif kind == "session_restart":
            current["masked"] += record.get("carryover_masked", 0)
            previous = [s for s in self.recent if s["session"] == current["session"] - 1]
            if previous:
                previous[0]["end"] = RESTART_PREFIX + str(record.get("reason", ""))
            self.restarts += 1
            self.restart_next = True
        elif kind == "session_end" and record.get("reason") != "restart":
            current["end"] = record.get("reason")

    def _reading(self, pct: float) -> None:
        self.readings += 1
        last = self.buckets[-1] if self.buckets else None
        if last is not None and last[4] < self.span:
            last[0], last[1], last[2] = max(last[0], pct), self.soft, self.hard
            last[3], last[4] = last[3] or self.restart_next, last[4] + 1
        else:
            self.buckets.append([pct, self.soft, self.hard, self.restart_next, 1])
        self.restart_next = False
        if len(self.buckets) > CHART_BUCKETS:
            self.span *= 2
            pairs = zip(self.buckets[0::2], self.buckets[1::2] + [None])
            self.buckets = [merged(a, b) for a, b in pairs]

    def shown(self) -> tuple[list[Record], int]:
        """The sessions the default view lists, and how many it leaves out."""
        if self.sessions <= RECENT_KEPT:
            return self.recent, 0
        return (self.first + self.recent)[:FIRST_KEPT] + self.recent[-FIRST_KEPT:], \
            self.sessions - 2 * FIRST_KEPT

    def totals(self) -> Record:
        total = dict(self.earlier)
        for session in self.recent:
            add_totals(total, session)
        return total

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunFigures:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def add_totals(total: Record, session: Record) -> None:
    for key in ("turns", "mask_rounds", "masked", "prompt_tokens", "completion_tokens"):
        total[key] += session[key]
    if session["peak_pct"] is not None:
        total["peak_pct"] = max(total["peak_pct"] or 0.0, session["peak_pct"])


def merged(a: list[Any], b: list[Any] | None) -> list[Any]:
    if b is None:
        return a
    return [max(a[0], b[0]), b[1], b[2], a[3] or b[3], a[4] + b[4]]
