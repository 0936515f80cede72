"""The demo's narration: what the viewer is about to see, what each event means, what to do next.

`caption(event)` is a pure function of one event (None for events that need no explaining);
the demo shows each caption as the event happens, beside the dashboard or the plain lines.

    caption(WindDown(session=1, context_used_pct=94.0))
    # 'Wind-down: the context is at 94.0% of the budget, past the hard threshold, and masking ...'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console, ConsoleDimensions

from ouroboros.store import events as ev
from ouroboros.store.events import EventLike, parse_event
from ouroboros.ui.numbers import used
from ouroboros.ui.plain import plural

CAPTION_ROWS = 6  # the terminal lines left above the live dashboard for the captions


def caption(e: EventLike) -> str | None:
    """What one event means, in a sentence or two; None when it speaks for itself."""
    match event := parse_event(e):
        case ev.SessionStart(session=1, carryover_messages=0):
            return (
                f"The model's window is {event.context_limit:,} tokens; the prompt may "
                f"take {event.budget:,} of them (the rest is kept for the reply). Past the "
                "soft threshold (context.soft_threshold_pct) old tool results get masked; "
                "past the hard one (context.hard_threshold_pct) the agent is told to save "
                "its state."
            )
        case ev.ToolResultEvent(truncated=True):
            return (
                "That output is longer than a tool result may be "
                "(context.max_tool_result_tokens, and never more than a quarter of the "
                "prompt budget), so the harness cut it on arrival, with a note saying so; "
                "the full text stays on disk for recall."
            )
        case ev.ToolCallEvent(name="recall"):
            return (
                "The agent asked for a masked tool result back: recall shows the full text "
                "the harness kept on disk."
            )
        case ev.ContextMask():
            return mask_caption(event)
        case ev.ContextDrop(turns_dropped=dropped):
            return (
                f"Even masked, the conversation did not fit the next request, so its oldest "
                f"{plural(dropped, 'whole turn')} went; the system prompt and the newest "
                "turn never do."
            )
        case ev.WindDown():
            return wind_down_caption(event)
        case ev.SessionRestart():
            return restart_caption(event)
        case ev.Handoff(session=2):
            return (
                "The new session also ends its first prompt with a handoff the harness "
                "built from its own log, not from the model: the files written so far, the "
                "last commands and their exit codes, calls that kept failing; and last, "
                "what to do first: re-read the notes. Facts only, after the carried turns, "
                "because a small model acts on what it reads last."
            )
        case ev.RunEnd():
            return end_caption(event)
    return None


def mask_caption(e: ev.ContextMask) -> str:
    count, before, after = e.observations_masked, e.tokens_before, e.tokens_after
    results = plural(count, "tool result")
    if e.preflight:
        return (
            f"The next request would not have fit, so {results} masked first "
            f"({before:,} -> {after:,} tokens)."
        )
    if e.total_masked > count:
        return (
            f"Masked {plural(count, 'more tool result')}: {before - after:,} tokens "
            f"back, {e.total_masked} masked so far."
        )
    oldest = "the oldest tool result" if count == 1 else f"the {count} oldest tool results"
    return (
        f"Masked: the context passed the soft threshold, so {oldest} became a one-line "
        f"placeholder saying what was there. That took it from {before:,} to {after:,} "
        "tokens without losing a turn; recall(id) brings a masked result back."
    )


def wind_down_caption(e: ev.WindDown) -> str:
    pct = used(e.context_used_pct)
    if e.reason == "reload":
        return (
            "A reload was asked: the agent is told to save its state to files, then the "
            "session restarts and the new one reads the config again."
        )
    if e.session > 1:
        return f"Wind-down again at {pct} of the budget: save your state, the agent is told."
    return (
        f"Wind-down: the context is at {pct} of the budget, past the hard threshold, and "
        "masking what is left would not take it far enough below: the session is full. "
        "The harness tells the agent to save its progress and state to workspace files "
        "now, because the next session starts from a fresh context and only files carry "
        "over. This agent writes progress.md, and a note in NOTES.md, "
        "its memory file."
    )


def restart_caption(e: ev.SessionRestart) -> str:
    session, carried = e.session, e.carryover_messages
    if session > 2:
        return f"Restart: session {session} starts fresh, {carried} messages carried over."
    return (
        f"Restart ({e.reason}): session {session} starts from a fresh context: "
        "SYSTEM_PROMPT.md read again from disk, with the agent's memory file (NOTES.md, "
        f"which the agent edits) pinned after it, the last {carried} messages of session "
        f"{session - 1} carried over as they happened, whole turns only, then a note "
        "saying a new session begins. The rest of what the agent knew is in its files: it "
        "carries on from progress.md."
    )


def end_caption(e: ev.RunEnd) -> str:
    done = (
        f"{plural(e.total_turns, 'turn')} in {plural(e.sessions, 'session')}, "
        f"{plural(e.restarts, 'restart')}"
    )
    match e.reason:
        case "task_complete":
            return (
                f"The agent called task_complete, which ends the run: {done}. The window "
                "never held more than a few files, yet the task got done."
            )
        case "interrupted":
            return (
                f"Stopped by Ctrl+C at once, the turn in progress cut short ({done}). A "
                "real run stopped this way continues with `ouroboros resume`."
            )
        case "interrupted_now":
            return f"Stopped at once by a second Ctrl+C ({done})."
        case "error":
            return f"The run failed after {done}; the error says why."
    return f"The run ended ({e.reason}) after {done}."


def opening(parts: int, window: int, *, paced: bool) -> str:
    """What the viewer is about to see."""
    pace = (
        " Paced for reading; --speed 2 runs it twice as fast, --speed max at once." if paced else ""
    )
    return (
        f"Ouroboros demo: a scripted agent (no model server needed) must copy the KEY line "
        f"of {plural(parts, 'file')} into results.txt, in a {window:,}-token window that "
        "holds only a few of them at once. Watch the harness keep it going: it masks old "
        "tool results, asks the agent to save its state when the window is nearly full, "
        f"and restarts the session with the recent turns carried over.{pace}"
    )


def closing(directory: Path, *, kept: bool) -> str:
    """Where to look next: the run's stats and log, and how to start a real project."""
    start = (
        "Start your own agent: `ouroboros init my-agent`, write its mission in "
        "my-agent/SYSTEM_PROMPT.md, then `cd my-agent && ouroboros run`."
    )
    if not kept:
        return (
            "The demo's temporary project is removed. To look around after the run, "
            "keep it with `ouroboros demo --keep DIR`, then `ouroboros stats --config "
            "DIR/ouroboros.toml` and `ouroboros logs --config DIR/ouroboros.toml` show what "
            f"happened.\n{start}"
        )
    config = directory / "ouroboros.toml"
    return (
        f"The demo project is in {directory}.\nSee what happened: "
        f"ouroboros stats --config {config}\nEvery event: ouroboros logs --config {config}"
        f"\n{start}"
    )


class CaptionedConsole(Console):
    """A console that says it is `reserve` lines shorter than the terminal, so that a live
    display fitted to it leaves room above itself for the lines printed while it runs."""

    def __init__(self, reserve: int = CAPTION_ROWS, **options: Any) -> None:
        super().__init__(**options)
        self.reserve = reserve

    @property
    def size(self) -> ConsoleDimensions:
        width, height = super().size
        return ConsoleDimensions(width, max(height - self.reserve, 1))


@dataclass
class Voice:
    """Where the demo's words go. Styled (on a terminal), captions print above the live
    dashboard (rich's Live prints above itself, and a CaptionedConsole keeps room for them);
    plain, each is one unwrapped line, for pipes and --headless.

        voice = Voice.for_terminal()
        hooks = live_hooks(console=voice.console)   # the dashboard shares its console
    """

    styled: bool
    console: Console = field(default_factory=lambda: Console(highlight=False))

    @classmethod
    def for_terminal(cls) -> Voice:
        return cls(styled=True, console=CaptionedConsole(highlight=False))

    def announce(self, text: str) -> None:
        self.console.print(
            text, style="bold" if self.styled else None, markup=False, soft_wrap=not self.styled
        )

    def caption(self, text: str) -> None:
        self.console.print(
            f"  » {text}",
            style="italic cyan" if self.styled else None,
            markup=False,
            soft_wrap=not self.styled,
        )
