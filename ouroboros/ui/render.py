"""Drawing a DashboardState: the context gauge, the alert, the streaming text, tools and
activity, fitted to the terminal.

`render(state, width, height)` returns a rich renderable and reads nothing but the state and
the size it is given, so a test renders it to `Console(record=True, width=80, height=24)` and
reads `export_text()`. Given a height, the frame is at most that many lines: `plan` shares the
rows among the panels so that every panel keeps its borders and at least one row, and every
line is cut with an ellipsis rather than wrapped. Without one, each panel shows its default
number of rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ouroboros.ui.dashboard import DashboardState, Note, ToolLine, parse_ts, zone
from ouroboros.ui.numbers import of_budget, threshold, used

GAUGE_WIDTH = 50
MIN_GAUGE_WIDTH = 10
TEXT_LINES, TOOL_ROWS, NOTE_ROWS = 4, 8, 6  # what each panel shows with no height given
PANELS = 4  # header, assistant, tools, activity: two border lines each
HEADER_ROWS = 2  # the counters and the context line
CLOCK_MIN_WIDTH = 100  # narrower, the tools panel leaves out the time of day
LEVEL_STYLES = {"info": "cyan", "warn": "yellow", "error": "bold red"}
ALERT_STYLES = {"info": "bold", "warn": "bold black on yellow", "error": "bold white on red"}


@dataclass(frozen=True)
class Plan:
    """How many rows each part of the dashboard gets."""

    text: int
    tools: int
    notes: int
    alert: int
    marks: bool  # the row of threshold labels under the gauge


def plan(state: DashboardState, width: int, height: int | None) -> Plan:
    """Share `height` lines among the panels (a pure function of the state and the size).

    The alert comes first (it is why a person looks), then one row for each panel, then the
    threshold labels, then what is left, a row at a time: tools, text, activity. Rows nobody
    has anything for are not handed out, so a quiet run leaves the terminal's bottom empty."""
    alert = alert_rows(state, width, 3)
    if height is None:
        return Plan(TEXT_LINES, TOOL_ROWS, NOTE_ROWS, alert, True)
    # as many rows as its fix needs, while every panel keeps one
    alert = min(
        alert_rows(state, width, 3 if height >= 22 else 2),
        max(height - 2 * PANELS - HEADER_ROWS - 3, 1),
    )
    rows = height - 2 * PANELS - HEADER_ROWS - alert
    marks = rows >= 4
    rows -= 3 + marks
    wants = {
        "tools": len(state.tools),
        "notes": note_rows(state, width),
        "text": min(text_rows(state.text, width - 4), 2 * TEXT_LINES),
    }
    got = dict.fromkeys(wants, 1)
    while rows > 0 and any(got[k] < wants[k] for k in got):
        for key in ("tools", "text", "notes"):
            if rows > 0 and got[key] < wants[key]:
                got[key] += 1
                rows -= 1
    return Plan(got["text"], got["tools"], got["notes"], alert, marks)


def alert_rows(state: DashboardState, width: int, lines: int) -> int:
    """The rows the alert takes: all it needs up to `lines`, and more where what it says to
    do (see fix_at) needs more to be shown whole."""
    if state.alert is None:
        return 0
    words, room = state.alert.text.split(), alert_room(state.alert, width)
    whole = len(wrapped(words, room))
    return min(whole, max(lines, len(wrapped(["…", *words[fix_at(words) :]], room))))


def note_rows(state: DashboardState, width: int) -> int:
    """The rows the activity pane could use: a row a note, more for a restart (its reason
    whole) and for the newest note a person should act on, wrapped."""
    notes = list(state.notes)
    room = note_room(state, width)
    newest = next((note for note in reversed(notes) if acted_on(note)), None)
    wrapping = [note for note in notes if note is newest or note.kind == "session_restart"]
    return len(notes) + sum(len(wrapped(note.text.split(), room)) - 1 for note in wrapping)


def text_rows(text: str, inner: int) -> int:
    """About how many rows `text` takes wrapped to `inner` columns (enough to plan with)."""
    return sum(max(1, -(-len(line) // max(inner, 1))) for line in text.strip().splitlines())


def render(
    state: DashboardState, width: int = 100, height: int | None = None, now: datetime | None = None
) -> RenderableType:
    """The whole dashboard, `width` columns wide and at most `height` lines tall: a header
    with the gauge and the alert, then the assistant, tools and activity. Given `now`, what
    the run waits on says for how long."""
    shares = plan(state, width, height)
    return Group(
        header(state, width, shares, now),
        assistant(state, shares.text, now),
        tools(state, width, shares.tools),
        activity(state, shares.notes, height, width),
    )


def waited(state: DashboardState, now: datetime | None) -> str | None:
    """`waiting for the model 12s`: what the run waits on and for how long, if it waits."""
    waiting = state.waiting()
    if waiting is None or now is None:
        return None
    what, since = waiting
    seconds = max(0, int((now - parse_ts(since)).total_seconds()))
    return f"{what} {seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{what} {seconds}s"


def shown_model(state: DashboardState) -> str:
    """The model that answers: the one the server names where it serves another than
    model.name (llama.cpp serves its one model under any name), else model.name."""
    return state.served_model or state.model


def header(
    state: DashboardState, width: int = 100, shares: Plan | None = None, now: datetime | None = None
) -> Panel:
    shares = shares or plan(state, width, None)
    inner = width - 4  # borders and padding
    title = (
        "ouroboros"
        + (f" · run {state.run_id}" if state.run_id else "")
        + (f" · {shown_model(state)}" if state.model or state.served_model else "")
    )
    status_style = "green" if state.status == "running" else "yellow" if not state.ended else "bold"
    status = waited(state, now) or state.status
    context, marks = context_line(state, inner)
    rows: list[RenderableType] = [counters(state, inner), context]
    if shares.marks:
        rows.append(marks)
    if state.alert and shares.alert:
        rows.extend(alert_lines(state, width, shares.alert))
    return Panel(
        Group(*rows),
        title=Text(title, style="bold", no_wrap=True, overflow="ellipsis"),
        title_align="left",
        subtitle=Text(status, style=status_style),
        subtitle_align="right",
    )


def counters(state: DashboardState, inner: int = 96) -> Text:
    rate = f"{state.tokens_per_sec:,.0f}" if state.tokens_per_sec is not None else "--"
    session_turn, total_turns = state.counted_turns()
    parts = [
        ("session", state.session),
        ("turn", session_turn),
        ("total turns", total_turns),
        ("restarts", state.restarts),
        ("masked", state.masked),
        ("~tok/s", rate),
    ]
    length = sum(len(f"{label} {value}") for label, value in parts)
    gap = next((g for g in ("   ", "  ") if length + len(g) * (len(parts) - 1) <= inner), " ")
    text = Text(no_wrap=True, overflow="ellipsis")
    for index, (label, value) in enumerate(parts):
        if index:
            text.append(gap)
        text.append(f"{label} ", style="dim").append(str(value), style="bold")
    return text


def context_line(state: DashboardState, inner: int = 96) -> tuple[Text, Text]:
    """`context ███░░│░│ 2,918/6,144 tokens  47.5%  cache 84%` in one line of `inner` columns,
    the gauge as wide as fits, and the row of threshold labels that goes under it. The cache
    figure (the run's share of prompt tokens the server took from its prefix cache) is there
    only when the server reports it, and only while the line has room for it."""
    pct = used(state.context_pct)
    reading = state.prompt_tokens is not None and state.budget
    used_forms = (
        [
            of_budget(state.prompt_tokens or 0, state.budget or 0),
            f"{state.prompt_tokens:,}/{state.budget:,}",
        ]
        if reading
        else ["no reading yet", "--"]
    )
    hit = state.cache_hit_pct
    caches = [f"  cache {hit:.0f}%", ""] if hit is not None else [""]
    prefix = "context "
    for shown, cache in [(shown, cache) for cache in caches for shown in used_forms]:
        suffix = f"  {shown}  {pct}{cache}"
        bar_width = min(GAUGE_WIDTH, inner - len(prefix) - len(suffix))
        if bar_width >= MIN_GAUGE_WIDTH:
            break
    bar, marks = gauge(state.context_pct, state.soft, state.hard, max(bar_width, MIN_GAUGE_WIDTH))
    line = Text(prefix, no_wrap=True, overflow="ellipsis").append_text(bar)
    line.append(f"  {shown}  ")
    line.append(pct, style=f"bold {state.zone}" if state.context_pct is not None else "dim")
    if cache:
        line.append(cache, style="dim")
    labels = Text(" " * len(prefix), no_wrap=True, overflow="ellipsis").append_text(marks)
    window = window_label(state, inner - len(labels) - 2)
    if window:
        labels.append(" " * (inner - len(labels) - len(window))).append(window, style="dim")
    return line, labels


def window_label(state: DashboardState, room: int) -> str:
    """`budget 6,144 of window 8,192 (allocated by Ollama (/api/ps))`: the budget the gauge
    and the thresholds are shares of, the window it is a share of, and where its size came
    from; as much of that as there is room for, the window first, then its source."""
    if not state.context_limit:
        return ""
    window = f"window {state.context_limit:,}"
    source = f" ({state.limit_source})" if state.limit_source else ""
    budget = f"budget {state.budget:,} of " if state.budget else ""
    forms = [f"{budget}{window}{source}", f"{window}{source}", f"{budget}{window}", window]
    return next((form for form in forms if len(form) <= room), "")


def gauge(
    pct: float | None, soft: float, hard: float, width: int = GAUGE_WIDTH
) -> tuple[Text, Text]:
    """The context bar, coloured by zone, with the soft and hard thresholds marked on it, and
    the row of threshold labels that goes under it. `pct` in percent, thresholds as fractions."""
    filled = round(min(max(pct or 0.0, 0.0), 100.0) / 100 * width)
    colour = zone(pct or 0.0, soft, hard)
    soft_at, hard_at = (min(round(fraction * width), width - 1) for fraction in (soft, hard))
    marks = {soft_at: "yellow", hard_at: "red"}
    bar = Text()
    for cell in range(width):
        if cell in marks:
            bar.append(
                "│", style=f"bold black on {colour}" if cell < filled else f"bold {marks[cell]}"
            )
        elif cell < filled:
            bar.append("█", style=colour)
        else:
            bar.append("░", style="dim")
    soft_label, hard_label = f"↑soft {threshold(soft)}", f"↑hard {threshold(hard)}"
    hard_at = max(hard_at, soft_at + len(soft_label) + 1)
    labels = Text(" " * soft_at).append(soft_label, style="yellow")
    labels.append(" " * (hard_at - soft_at - len(soft_label))).append(hard_label, style="red")
    return bar, labels


def alert_lines(state: DashboardState, width: int, lines: int) -> list[Text]:
    """The newest warning or error, word-wrapped to at most `lines` lines of the header. A
    message too long for them loses words from its middle, never its last clause, which is
    where a message says what to do: `WARNING the server … ; set model.context_limit`."""
    alert: Note | None = state.alert
    if alert is None or lines <= 0:
        return []
    indent = " " * (len(alert.clock) + 1)
    room = alert_room(alert, width)
    rows = wrapped(fitted_words(alert.text.split(), room, lines), room)
    style = ALERT_STYLES[alert.level]
    return [
        Text(
            (f"{alert.clock} " if not index else indent) + row,
            style=style,
            no_wrap=True,
            overflow="ellipsis",
        )
        for index, row in enumerate(rows)
    ]


def alert_room(alert: Note, width: int) -> int:
    """The columns the alert's text has in the header, beside its time of day."""
    return max(width - 4 - len(alert.clock) - 1, 1)


def wrapped(words: list[str], room: int) -> list[str]:
    """`words` greedily wrapped to rows of `room` columns (a longer word is cut)."""
    rows: list[str] = []
    for word in words:
        word = word[:room]
        if rows and len(rows[-1]) + 1 + len(word) <= room:
            rows[-1] += " " + word
        else:
            rows.append(word)
    return rows


FIX_MARKERS = [
    tuple(marker.split())
    for marker in (
        "Fix:",
        "to go on:",
        "to give it more to do:",
        "check its notes, then:",
        "(did you mean",
    )
]
"""Where a message starts saying what to do."""


def fix_at(words: list[str]) -> int:
    """The index of the word where a message starts saying what to do: its first `Fix:`,
    `to go on:`, `(did you mean` ...; else its last clause (after the last `;` outside
    parentheses); else its second half."""
    for index in range(len(words)):
        if any(tuple(words[index : index + len(marker)]) == marker for marker in FIX_MARKERS):
            return index
    clause, depth = len(words) // 2, 0
    for index, word in enumerate(words[:-1]):
        depth += word.count("(") - word.count(")")
        if word.endswith(";") and depth <= 0:
            clause = index + 1
    return clause


def fitted_words(words: list[str], room: int, lines: int) -> list[str]:
    """`words`, or when they take more than `lines` rows, their start and what they say to do
    (see fix_at) with an ellipsis between; that part alone, cut at its end, when even that is
    too long."""
    if len(wrapped(words, room)) <= lines:
        return words
    clause = fix_at(words)
    head, tail = words[:clause], words[clause:]
    while head:
        head = head[:-1]
        if len(wrapped([*head, "…", *tail], room)) <= lines:
            return [*head, "…", *tail]
    kept = ["…", *tail]
    while len(kept) > 1 and len(wrapped([*kept, "…"], room)) > lines:
        kept.pop()
    return [*kept, "…"]


@dataclass
class Tail:
    """The last `lines` lines of a text as wrapped to the space it is given."""

    text: Text
    lines: int

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        wrapped = self.text.wrap(console, options.max_width)
        yield from list(wrapped)[-self.lines :]


def assistant(state: DashboardState, lines: int = TEXT_LINES, now: datetime | None = None) -> Panel:
    if state.text.strip():
        body: RenderableType = Tail(Text(state.text.strip()), lines)
    else:
        body = Text(
            "(waiting for the model)"
            if state.streaming or not state.total_turns
            else "(no text: tool calls only)",
            style="dim",
        )
    waiting = waited(state, now)
    title = "assistant" + (
        " (streaming)"
        if state.streaming
        else f" (last reply; {waiting})"
        if waiting and state.text.strip()
        else ""
    )
    return Panel(body, title=title, title_align="left", border_style="blue")


def tools(state: DashboardState, width: int = 100, rows: int = TOOL_ROWS) -> Panel:
    """The newest tool calls, one row each: what was called on what, and what came back.
    The call gets the room it needs up to half the row; the result takes the rest."""
    shown = list(state.tools)[-rows:]
    if not shown:
        return Panel(
            Text("(no tool calls yet)", style="dim"),
            title="tools",
            title_align="left",
            border_style="magenta",
        )
    with_clock = width >= CLOCK_MIN_WIDTH
    rows_cells = [
        ([line.clock] if with_clock else [])
        + [line.call, line.result or "running...", tool_size(line, with_clock)]
        for line in shown
    ]
    size_width = max(len(cells[-1]) for cells in rows_cells)
    clock_width = len(shown[0].clock) + 1 if with_clock else 0
    room = width - 4 - clock_width - size_width - 2  # borders, padding, gaps between columns
    longest_call = max(len(line.call) for line in shown)
    longest_result = max(len(cells[-2]) for cells in rows_cells)
    call_width = max(min(longest_call, max(room // 2, room - longest_result)), 1)

    table = Table.grid(padding=(0, 1), expand=True)
    if with_clock:
        table.add_column(style="dim", no_wrap=True)
    table.add_column(width=call_width, no_wrap=True, overflow="ellipsis")
    table.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
    table.add_column(style="dim", no_wrap=True, justify="right", min_width=size_width)
    for line, cells in zip(shown, rows_cells):
        style = "dim" if line.ok is None else "green" if line.ok else "red"
        cells[-2] = Text(cells[-2], style=style)
        table.add_row(*cells)
    return Panel(table, title="tools", title_align="left", border_style="magenta")


def tool_size(line: ToolLine, with_time: bool) -> str:
    """`6.1 kB, 12 ms, truncated`, or on a narrow terminal `6.1 kB (cut)`."""
    if line.result is None:
        return ""
    cut = (", truncated" if with_time else " (cut)") if line.truncated else ""
    took = f", {line.duration_ms} ms" if with_time else ""
    return f"{line.size}{took}{cut}"


def activity(
    state: DashboardState, rows: int = NOTE_ROWS, height: int | None = None, width: int = 100
) -> Panel:
    """The newest notes. With the height counted, a note is one row, cut short, except one
    that tells a person something to act on (a warning, an error, the run's end): that one
    wraps, and if it must be cut, it loses words from its middle, never what to do."""
    table = Table.grid(padding=(0, 1), expand=True)
    table.add_column(style="dim", no_wrap=True)
    if height is None:
        table.add_column(ratio=1, overflow="fold")
        shown = [(note, note.text) for note in list(state.notes)[-rows:]]
    else:
        table.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
        shown = fitted_notes(list(state.notes), rows, note_room(state, width))
    for note, text in shown:
        table.add_row(note.clock, Text(text, style=LEVEL_STYLES[note.level]))
    body: RenderableType = table if state.notes else Text("(nothing yet)", style="dim")
    return Panel(body, title="activity", title_align="left", border_style="cyan")


def note_room(state: DashboardState, width: int) -> int:
    """The columns a note's text has beside its time of day."""
    clock = len(state.notes[-1].clock) if state.notes else 8
    return max(width - 4 - clock - 1, 1)


def acted_on(note: Note) -> bool:
    """Whether a note tells a person something to act on: it wraps instead of being cut."""
    return note.level != "info" or note.text.startswith("run ended")


def fitted_notes(notes: list[Note], rows: int, room: int) -> list[tuple[Note, str]]:
    """The newest notes that fit in `rows` rows, oldest first, each with its text as shown."""
    shown: list[tuple[Note, str]] = []
    for note in reversed(notes):
        left = rows - sum(text.count("\n") + 1 for _, text in shown)
        if left <= 0:
            break
        text = note.text
        if acted_on(note):
            text = "\n".join(wrapped(fitted_words(text.split(), room, left), room))
        elif note.kind == "session_restart":  # its reason, which comes first, kept whole
            words = text.split() if left > 1 or not note.short else note.short.split()
            text = "\n".join(head_rows(words, room, left))
        shown.append((note, text))
    return shown[::-1]


def head_rows(words: list[str], room: int, lines: int) -> list[str]:
    """`words` wrapped to at most `lines` rows of `room` columns, cut at the end (with an
    ellipsis) where they take more."""
    rows = wrapped(words, room)
    if len(rows) <= lines:
        return rows
    kept = rows[:lines]
    kept[-1] = kept[-1][: room - 1] + "…"
    return kept
