"""Drawing a DashboardState: the context gauge, the streaming text, tools and activity.

`render(state)` returns a rich renderable and reads nothing but the state, so a test renders
it to `Console(record=True, width=100)` and reads `export_text()`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ouroboros.ui.dashboard import DashboardState, zone

GAUGE_WIDTH = 50
TEXT_LINES = 4
LEVEL_STYLES = {"info": "cyan", "warn": "yellow", "error": "bold red"}


def render(state: DashboardState) -> RenderableType:
    """The whole dashboard: a header with the gauge, then the assistant, tools and activity."""
    return Group(header(state), assistant(state), tools(state), activity(state))


def header(state: DashboardState) -> Panel:
    bar, marks = gauge(state.context_pct, state.soft, state.hard)
    used = (f"{state.prompt_tokens:,}/{state.budget:,} tokens"
            if state.prompt_tokens is not None and state.budget else "no reading yet")
    pct = f"{state.context_pct:.1f}%" if state.context_pct is not None else "--"
    context = Text("context ").append_text(bar).append(f"  {used}  ")
    context.append(pct, style=f"bold {state.zone}" if state.context_pct is not None else "dim")
    title = "ouroboros" + (f" · run {state.run_id}" if state.run_id else "") \
        + (f" · {state.model}" if state.model else "")
    status_style = "green" if state.status == "running" else "yellow" if not state.ended \
        else "bold"
    return Panel(Group(counters(state), context, Text(" " * len("context ")) + marks),
                 title=Text(title, style="bold"), title_align="left",
                 subtitle=Text(state.status, style=status_style), subtitle_align="right")


def counters(state: DashboardState) -> Text:
    rate = f"{state.tokens_per_sec:,.0f}" if state.tokens_per_sec is not None else "--"
    parts = [("session", state.session), ("turn", state.turn),
             ("total turns", state.total_turns), ("restarts", state.restarts),
             ("masked", state.masked), ("~tok/s", rate)]
    text = Text()
    for index, (label, value) in enumerate(parts):
        if index:
            text.append("   ")
        text.append(f"{label} ", style="dim").append(str(value), style="bold")
    return text


def gauge(pct: float | None, soft: float, hard: float,
          width: int = GAUGE_WIDTH) -> tuple[Text, Text]:
    """The context bar, coloured by zone, with the soft and hard thresholds marked on it, and
    the row of threshold labels that goes under it. `pct` in percent, thresholds as fractions."""
    filled = round(min(max(pct or 0.0, 0.0), 100.0) / 100 * width)
    colour = zone(pct or 0.0, soft, hard)
    soft_at, hard_at = (min(round(fraction * width), width - 1) for fraction in (soft, hard))
    marks = {soft_at: "yellow", hard_at: "red"}
    bar = Text()
    for cell in range(width):
        if cell in marks:
            bar.append("│", style=f"bold black on {colour}" if cell < filled
                       else f"bold {marks[cell]}")
        elif cell < filled:
            bar.append("█", style=colour)
        else:
            bar.append("░", style="dim")
    soft_label, hard_label = f"↑soft {100 * soft:.0f}%", f"↑hard {100 * hard:.0f}%"
    hard_at = max(hard_at, soft_at + len(soft_label) + 1)
    labels = Text(" " * soft_at).append(soft_label, style="yellow")
    labels.append(" " * (hard_at - soft_at - len(soft_label))).append(hard_label, style="red")
    return bar, labels


@dataclass
class Tail:
    """The last `lines` lines of a text as wrapped to the space it is given."""

    text: Text
    lines: int

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        wrapped = self.text.wrap(console, options.max_width)
        yield from list(wrapped)[-self.lines:]


def assistant(state: DashboardState) -> Panel:
    if state.text.strip():
        body: RenderableType = Tail(Text(state.text.strip()), TEXT_LINES)
    else:
        body = Text("(waiting for the model)" if state.streaming or not state.total_turns
                    else "(no text: tool calls only)", style="dim")
    title = "assistant" + (" (streaming)" if state.streaming else "")
    return Panel(body, title=title, title_align="left", border_style="blue")


def tools(state: DashboardState) -> Panel:
    table = Table.grid(padding=(0, 1), expand=True)
    table.add_column(style="dim", no_wrap=True)
    table.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
    table.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
    table.add_column(style="dim", no_wrap=True, justify="right")
    for line in state.tools:
        style = "dim" if line.ok is None else "green" if line.ok else "red"
        table.add_row(line.clock, Text(line.call), Text(line.result or "running...", style=style),
                      line.size)
    body: RenderableType = table if state.tools else Text("(no tool calls yet)", style="dim")
    return Panel(body, title="tools", title_align="left", border_style="magenta")


def activity(state: DashboardState) -> Panel:
    table = Table.grid(padding=(0, 1), expand=True)
    table.add_column(style="dim", no_wrap=True)
    table.add_column(ratio=1, overflow="fold")
    for note in state.notes:
        table.add_row(note.clock, Text(note.text, style=LEVEL_STYLES[note.level]))
    body: RenderableType = table if state.notes else Text("(nothing yet)", style="dim")
    return Panel(body, title="activity", title_align="left", border_style="cyan")
