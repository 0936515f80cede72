"""What a run did, session by session: `ouroboros stats`.

`summary_stats(summary)` takes the numbers from the run's summary (store/summary.py, the fold
every reader shares; the manifest keeps it, so the default view is O(1) in turns run);
`run_stats(records)` folds every record into a summary that keeps every session and reading
(`stats --all`); `stats_view(stats)` draws them as a table and a chart of context use over
the run's turns. A run of more than SUMMARY_AFTER sessions shows its first and last few
sessions and the totals, unless asked for all.

    stats = summary_stats(read_tail(run_dir).summary())
    Console().print(stats_view(stats))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ouroboros.config import ContextConfig
from ouroboros.store.events import EventBase, EventLike
from ouroboros.store.summary import (
    FIRST_KEPT,
    RECENT_KEPT,
    RESTART_PREFIX,
    RunSummary,
    cache_hit_pct,
)
from ouroboros.ui.chart import LABEL_WIDTH, context_chart
from ouroboros.ui.numbers import BASE, sizes, used
from ouroboros.ui.plain import masked_text, plural

_DEFAULTS = ContextConfig()
SUMMARY_AFTER = RECENT_KEPT  # sessions; a longer run's table shows only its ends
FIRST_SHOWN = FIRST_KEPT
LAST_SHOWN = FIRST_KEPT


@dataclass
class SessionStats:
    session: int
    turns: int = 0
    peak_pct: float | None = None
    mask_rounds: int = 0
    masked: int = 0  # by masking rounds, and by fitting the carryover into a restart
    end: str = "running"  # "restart: <why>", a stop reason, or "running" while it goes on
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # of the prompts whose server said what its cache served
    cache_prompt_tokens: int = 0  # those prompts, in the server's tokens

    @property
    def cache_hit_pct(self) -> float | None:
        """The share of those prompts the server took from its prefix cache (None: not said)."""
        return cache_hit_pct(
            {"cached_tokens": self.cached_tokens, "cache_prompt_tokens": self.cache_prompt_tokens}
        )


@dataclass
class RunStats:
    run_id: str = ""
    soft: float = _DEFAULTS.soft_threshold_pct
    hard: float = _DEFAULTS.hard_threshold_pct
    window: int | None = None  # the window and the prompt budget at the newest reading
    budget: int | None = None
    sessions: list[SessionStats] = field(default_factory=list)
    context_pcts: list[float] = field(default_factory=list)  # one reading per turn, in order
    restarts_at: list[int] = field(default_factory=list)  # index of each new session's 1st turn
    thresholds: list[tuple[float, float]] = field(default_factory=list)  # (soft, hard) per reading
    end: str | None = None
    # From the run's summary: `sessions` are only those shown, the others are counted in
    # `hidden` and summed in `totals`; the chart's readings are bucketed.
    hidden: int = 0
    totals: SessionStats | None = None
    readings: int | None = None
    restart_count: int | None = None

    @property
    def total_turns(self) -> int:
        return self.session_totals().turns

    @property
    def restarts(self) -> int:
        return self.restart_count if self.restart_count is not None else len(self.restarts_at)

    def session_totals(self) -> SessionStats:
        if self.totals is not None:
            return self.totals
        peaks = [s.peak_pct for s in self.sessions if s.peak_pct is not None]
        return SessionStats(
            0,
            turns=sum(s.turns for s in self.sessions),
            peak_pct=max(peaks) if peaks else None,
            mask_rounds=sum(s.mask_rounds for s in self.sessions),
            masked=sum(s.masked for s in self.sessions),
            prompt_tokens=sum(s.prompt_tokens for s in self.sessions),
            completion_tokens=sum(s.completion_tokens for s in self.sessions),
            cached_tokens=sum(s.cached_tokens for s in self.sessions),
            cache_prompt_tokens=sum(s.cache_prompt_tokens for s in self.sessions),
        )


def summary_stats(
    summary: RunSummary, soft: float | None = None, hard: float | None = None
) -> RunStats:
    """The numbers `stats` shows, from a run's summary. The thresholds are the run's own,
    else `soft` and `hard` (the config's), else the defaults."""
    defaults = RunStats()
    stats = RunStats(
        run_id=summary.run_id,
        end=summary.ended_by,
        soft=first_set(summary.soft, soft, defaults.soft),
        hard=first_set(summary.hard, hard, defaults.hard),
    )
    shown, stats.hidden = summary.shown()
    stats.sessions = [SessionStats(**s) for s in shown]
    stats.totals = SessionStats(**summary.totals())
    stats.readings, stats.restart_count = summary.readings, summary.session_restarts
    stats.window, stats.budget = summary.window, summary.budget
    stats.context_pcts = [b[0] for b in summary.buckets]
    stats.thresholds = [
        (first_set(b[1], stats.soft), first_set(b[2], stats.hard)) for b in summary.buckets
    ]
    stats.restarts_at = [i for i, b in enumerate(summary.buckets) if b[3]]
    return stats


def first_set(*values: float | None) -> float:
    return next(v for v in values if v is not None)


def run_stats(
    records: Iterable[EventLike | EventBase], soft: float | None = None, hard: float | None = None
) -> RunStats:
    """Every session and every reading of a run, from all its records (`stats --all`)."""
    summary = RunSummary(keep_all=True)
    for record in records:
        summary.add_record(record.record() if isinstance(record, EventBase) else record)
    return summary_stats(summary, soft, hard)


UNBOUNDED = 10_000  # columns: wider than any table, to measure one uncut
CHART_MARGIN = LABEL_WIDTH + len("   ↻ restart")  # the row labels and the legend beside it


@dataclass
class Chart:
    """The context chart, at most `width` turns' columns wide and narrower when the terminal
    is, so that no line of it wraps (its threshold labels and legend included)."""

    stats: RunStats
    width: int

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        stats = self.stats
        width = max(10, min(self.width, options.max_width - CHART_MARGIN))
        yield Text(
            "\n".join(
                context_chart(
                    stats.context_pcts,
                    stats.soft,
                    stats.hard,
                    stats.restarts_at,
                    width=width,
                    thresholds=stats.thresholds,
                    turns=stats.readings,
                )
            ),
            no_wrap=True,
        )


def stats_view(
    stats: RunStats,
    chart_width: int = 72,
    *,
    all_sessions: bool = False,
    running: bool | None = None,
) -> RenderableType:
    """A summary line, the per-session table (only its first and last sessions for a long
    run, unless `all_sessions`) with its totals, and the context chart. `running`: whether a
    live process runs it now (None: not known)."""
    ended = f", ended: {stats.end}" if stats.end else f", {going(running)}"
    totals = stats.session_totals()
    masked = masked_text(totals.masked, totals.mask_rounds)
    count = len(stats.sessions) + stats.hidden
    summary = Text(
        f"run {stats.run_id}: {plural(count, 'session')}, "
        f"{plural(stats.total_turns, 'turn')}, {plural(stats.restarts, 'restart')}"
        f"{ended}\nmasking: {masked}{cache_text(totals)}\n"
        f"{sizes(stats.window, stats.budget, stats.soft, stats.hard)}",
        style="bold",
    )
    chart = Chart(stats, chart_width)
    title = Text(f"context use per turn ({BASE})", style="bold")
    shown, hidden = (
        shown_sessions(stats.sessions, all_sessions)
        if not stats.hidden
        else (stats.sessions, stats.hidden)
    )
    reasons = restart_reasons(shown)
    notes = [Text(f"[{n}] restart: {reason}") for reason, n in reasons.items()]
    if hidden:
        notes.append(
            Text(f"{plural(hidden, 'session')} not shown: `ouroboros stats --all` lists every one")
        )
    table = SessionsTable(stats, shown, reasons, hidden)
    return Group(summary, Text(), table, *notes, Text(), title, chart)


@dataclass
class SessionsTable:
    """The sessions' table, with a column of each one's cache hit where the server said it
    and the terminal has room for it without cutting a word of the table short."""

    stats: RunStats
    shown: list[SessionStats]
    reasons: dict[str, int]
    hidden: int = 0

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        table = sessions_table(self.stats, self.shown, self.reasons, self.hidden, cache=True)
        unbounded = options.update_width(UNBOUNDED)  # its width with nothing cut
        if Measurement.get(console, unbounded, table).maximum > options.max_width:
            table = sessions_table(self.stats, self.shown, self.reasons, self.hidden)
        yield table


def cache_text(totals: SessionStats) -> str:
    """A line `prompt cache: 84% of 120,400 prompt tokens served from the server's cache`
    where the server said what its prefix cache served, else ""."""
    hit = totals.cache_hit_pct
    if hit is None:
        return ""
    return (
        f"\nprompt cache: {hit:.0f}% of {totals.cache_prompt_tokens:,} prompt tokens "
        "served from the server's cache"
    )


def going(running: bool | None) -> str:
    """A run with no end since it last started or resumed: running, or stopped without one."""
    if running is None:
        return "still going (or stopped without an end)"
    return "running" if running else "stopped (killed?), resumable"


def shown_sessions(
    sessions: list[SessionStats], all_sessions: bool = False
) -> tuple[list[SessionStats], int]:
    """The sessions the table lists and how many it leaves out: every one, or for a run of
    more than SUMMARY_AFTER sessions the first FIRST_SHOWN and the last LAST_SHOWN."""
    if all_sessions or len(sessions) <= SUMMARY_AFTER:
        return sessions, 0
    return sessions[:FIRST_SHOWN] + sessions[-LAST_SHOWN:], len(sessions) - FIRST_SHOWN - LAST_SHOWN


def restart_reasons(sessions: list[SessionStats]) -> dict[str, int]:
    """Each distinct restart reason and its footnote number, so the table stays narrow."""
    reasons: dict[str, int] = {}
    for s in sessions:
        if s.end.startswith(RESTART_PREFIX):
            reasons.setdefault(s.end.removeprefix(RESTART_PREFIX), len(reasons) + 1)
    return reasons


def sessions_table(
    stats: RunStats,
    shown: list[SessionStats],
    reasons: dict[str, int],
    hidden: int = 0,
    *,
    cache: bool = False,
) -> Table:
    """One row per shown session (a "..." row where `hidden` ones were left out) and a
    totals row over every session; with `cache`, a column of the cache hit, if any was said."""
    table = Table(show_footer=len(stats.sessions) + stats.hidden > 1)
    total = stats.session_totals()
    # Two-line headers keep the table within 80 columns.
    columns = [
        ("session", "all"),
        ("turns", f"{total.turns:,}"),
        ("peak\nctx", used(total.peak_pct)),
        ("mask\nrounds", f"{total.mask_rounds:,}"),
        ("masked\nresults", f"{total.masked:,}"),
        ("prompt\ntokens", f"{total.prompt_tokens:,}"),
        ("compl.\ntokens", f"{total.completion_tokens:,}"),
    ]
    cached = cache and total.cache_hit_pct is not None  # only where the server said it
    if cached:
        columns.append(("cache\nhit", hit_text(total.cache_hit_pct)))
    for header, footer in columns:
        table.add_column(header, footer, justify="right", no_wrap=True)
    table.add_column("ended by", ratio=1)
    for index, s in enumerate(shown):
        if hidden and index == FIRST_SHOWN:
            table.add_row("...", *[""] * (len(columns) - 1), Text(f"({hidden:,} more)"))
        cells = [
            str(s.session),
            f"{s.turns:,}",
            used(s.peak_pct),
            f"{s.mask_rounds:,}",
            f"{s.masked:,}",
            f"{s.prompt_tokens:,}",
            f"{s.completion_tokens:,}",
        ]
        if cached:
            cells.append(hit_text(s.cache_hit_pct))
        table.add_row(*cells, Text(ended_by(s.end, reasons)))
    return table


def hit_text(pct: float | None) -> str:
    return "--" if pct is None else f"{pct:.0f}%"


def ended_by(end: str, reasons: dict[str, int]) -> str:
    reason = end.removeprefix(RESTART_PREFIX)
    return f"restart [{reasons[reason]}]" if reason != end else end
