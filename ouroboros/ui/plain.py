"""Plain, greppable lines: one per event, for --headless, pipes and `ouroboros logs`; control
characters from the model or a tool are shown, never sent raw (ui/sanitize.py)."""

from __future__ import annotations

import io
import json
import os
import sys
from typing import Any, Callable, Iterable, TextIO

from ouroboros.errors import UsageError
from ouroboros.store import events as ev
from ouroboros.store.events import EVENT_TYPES, EventBase, EventLike, parse_event
from ouroboros.ui.numbers import of_budget, used
from ouroboros.ui.sanitize import neutralise


def select_types(types: Iterable[str]) -> set[str]:
    """The event types asked for (`logs --type`), checked against the known ones."""
    wanted = set(types)
    unknown = sorted(wanted - set(EVENT_TYPES))
    if unknown:
        raise UsageError(
            f"unknown event type {', '.join(unknown)}; known types: " + ", ".join(EVENT_TYPES)
        )
    return wanted


BOOKKEEPING = frozenset({"checkpoint"})
"""Event types that record state, not something the run did: `logs` and the dashboard skip
them unless asked for by name."""


def listed(event_type: str, wanted: set[str]) -> bool:
    """Whether `logs` shows an event: those of the types asked for, else all but
    bookkeeping."""
    return event_type in wanted if wanted else event_type not in BOOKKEEPING


def one_line(text: str, width: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def tool_call_text(name: str, arguments: str) -> str:
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        return f"{name}({one_line(arguments, 80)})"
    if isinstance(args, dict):
        inner = ", ".join(f"{k}={one_line(str(v), 60)!r}" for k, v in args.items())
        return f"{name}({inner})"
    return f"{name}({one_line(str(args), 80)})"


def sandbox_note(sandbox: dict[str, Any] | None) -> str:
    """What confines the shell, as `run_start` and `run_resumed` record it."""
    return f"; sandbox: {sandbox['summary']}" if isinstance(sandbox, dict) else ""


def resumed_text(e: ev.RunResumed) -> str:
    extra = ", torn last log line dropped" if e.torn_line_dropped else ""
    if e.interrupted_tools:
        extra += f", interrupted tool calls: {', '.join(e.interrupted_tools)}"
    return (
        f"run resumed at turn {e.total_turns} ({plural(e.restarts, 'restart')}{extra})"
        + sandbox_note(e.sandbox)
    )


def assistant_text(e: ev.Assistant) -> str:
    calls = ", ".join(call.name for call in e.tool_calls)
    text = one_line(e.text)
    if not text and not calls:
        return "assistant: (empty reply)"
    return f"assistant: {text}" + (f" -> {calls}" if calls else "")


def result_text(e: ev.ToolResultEvent) -> str:
    cut = ", truncated" if e.truncated else ""
    return (
        f"  -> {e.name} {'ok' if e.ok else 'FAILED'}: {one_line(e.summary, 100)} "
        f"({e.bytes} bytes, {e.duration_ms} ms{cut})"
    )


def usage_text(e: ev.TokenUsage) -> str:
    cached = f", {e.cached_tokens} cached" if e.cached_tokens else ""
    return (
        f"context {of_budget(e.prompt_tokens, e.budget)} ({used(e.context_used_pct)}, "
        f"{e.source}{cached}), +{e.completion_tokens} completion"
    )


def end_text(e: ev.RunEnd) -> str:
    summary = f": {one_line(e.summary, 200)}" if e.summary else ""
    then = f"; {e.next}" if e.next else ""
    return (
        f"run ended: {e.reason}{summary} after {plural(e.total_turns, 'turn')}, "
        f"{plural(e.sessions, 'session')}, {plural(e.restarts, 'restart')} "
        f"(exit {e.exit_code}){then}"
    )


def idle_limit_words(max_idle_turns: int) -> str:
    """When idle turns pause the run: "the run pauses after 3"; at 0, that it never does."""
    if max_idle_turns <= 0:
        return "agent.max_idle_turns = 0: the run never pauses"
    return f"the run pauses after {max_idle_turns}"


DESCRIBERS: dict[type[EventBase], Callable[[Any], str]] = {
    ev.RunStart: lambda e: (
        f"run {e.run_id} started (ouroboros {e.version})" + sandbox_note(e.sandbox)
    ),
    ev.RunResumed: resumed_text,
    ev.SessionStart: lambda e: (
        f"session {e.session} started: window {e.context_limit:,} tokens ({e.limit_source}), "
        f"budget {e.budget:,}, {plural(e.carryover_messages, 'message')} carried over"
    ),
    ev.Assistant: assistant_text,
    ev.ToolCallEvent: lambda e: f"tool {tool_call_text(e.name, e.arguments)}",
    ev.ToolResultEvent: result_text,
    ev.TokenUsage: usage_text,
    ev.ContextMask: lambda e: (
        f"masked {plural(e.observations_masked, 'tool result')} ({e.tokens_before:,} -> "
        f"{e.tokens_after:,} tokens, {e.tokens_before - e.tokens_after:,} freed; "
        f"{e.total_masked:,} masked in total)"
    ),
    ev.ContextDrop: lambda e: (
        (
            "dropped the oldest turn"
            if e.turns_dropped == 1
            else f"dropped the {e.turns_dropped} oldest turns"
        )
        + " to fit the window"
    ),
    ev.WindDown: lambda e: (
        f"wind-down: context at {used(e.context_used_pct)} of the budget, agent asked to save state"
    ),
    ev.SessionRestart: lambda e: (
        f"restart -> session {e.session}: {e.reason} (previous session ran "
        f"{plural(e.previous_turns, 'turn')}, {plural(e.carryover_messages, 'message')} "
        "carried)"
    ),
    ev.ContextTruncationDetected: lambda e: (
        f"WARNING the server cuts prompts: its counts stalled near {e.reported} tokens while "
        f"~{e.estimated} were sent; limit now {e.new_limit}"
    ),
    ev.ContextOverflowRecovered: lambda e: (
        f"prompt refused as too long ({e.error}); limit now {e.new_limit}"
    ),
    ev.Retry: lambda e: f"retry {e.attempt} in {e.delay_secs}s: {e.error}",
    ev.Security: lambda e: f"SECURITY {e.kind} in {e.tool}: {e.path or e.command or ''}",
    ev.WarningEvent: lambda e: f"WARNING {e.message}",
    ev.WarningCleared: lambda e: f"warning over: {e.message}",
    ev.ErrorEvent: lambda e: f"ERROR {e.message}",
    ev.Idle: lambda e: (
        f"no tool call in {plural(e.idle_turns, 'turn')} in a row: the continue message goes in "
        f"{e.pause_secs:g}s ({idle_limit_words(e.max_idle_turns)})"
    ),
    ev.Stuck: lambda e: (
        (f"STUCK ({e.kind}): " if e.kind != "redoing" else "WARNING work done again: ")
        + f"{e.detail}; "
        + ("the run pauses" if e.action == "pause" else "the agent is told")
    ),
    ev.UserMessage: lambda e: f"message for the agent: {one_line(e.text, 100)}",
    ev.Handoff: lambda e: f"handoff (~{e.tokens} tokens): {one_line(e.text, 100)}",
    ev.StopRequested: lambda e: (
        f"{e.signal}: stopping now (what was waited on is cancelled; the run stays resumable)"
    ),
    ev.ReloadRequested: lambda e: (
        "reload requested: the session ends after a wind-down, "
        "and the next one reads the config again"
    ),
    ev.ConfigChanged: lambda e: (
        f"config changed: {e.key} {json.dumps(e.old)} -> {json.dumps(e.new)} ({e.source})"
    ),
    ev.PromptChanged: lambda e: (
        f"system prompt changed: {e.path} ({e.old_chars:,} -> "
        f"{e.new_chars:,} characters), in use from this session"
    ),
    ev.RunEnd: end_text,
}
"""The line each event type is shown as; a type not here (session_end, checkpoint) gets
none of its own."""


def describe(e: EventLike) -> str | None:
    """The text of one event, or None for events not worth a line of their own."""
    event = parse_event(e)
    describer = DESCRIBERS.get(type(event))
    return describer(event) if describer is not None else None


def masked_text(results: int, rounds: int) -> str:
    """The one wording for masking in `status`, `stats` and `logs`: a masking round replaces
    the oldest tool results with placeholders (a restart may mask some more to fit what it
    carries over). "5 tool results masked (2 masking rounds)"."""
    return f"{plural(results, 'tool result')} masked ({plural(rounds, 'masking round')})"


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def format_line(e: EventLike) -> str | None:
    """The event's line: its time, session, turn and text; None for a quiet event."""
    event = parse_event(e)
    text = describe(event)
    if text is None:
        return None
    return neutralise(f"{event.ts[11:19]} s{event.session} t{event.turn} {text}")


def format_any(e: EventLike) -> str:
    """Like format_line, but every event gets a line: the quiet ones show their fields."""
    event = parse_event(e)
    line = format_line(event)
    if line is not None:
        return line
    fields = " ".join(
        f"{k}={one_line(str(v), 60)}" for k, v in event.record().items() if k not in ev.ENVELOPE
    )
    return neutralise(
        f"{event.ts[11:19]} s{event.session} t{event.turn} {event.type} {fields}".rstrip()
    )


def plain_printer(
    out: TextIO | None = None, *, on_closed: Callable[[], None] | None = None
) -> Callable[[EventLike], None]:
    """A listener printing format_line to `out` (default: sys.stdout at the time of printing).
    When the reader goes away (a broken pipe), printing stops and `on_closed` is called once."""
    return line_printer(format_line, out, on_closed=on_closed)


def line_printer(
    line_of: Callable[[Any], str | None],
    out: TextIO | None = None,
    *,
    on_closed: Callable[[], None] | None = None,
) -> Callable[[Any], None]:
    """A listener printing `line_of(event)` (nothing for None) to `out`, as plain_printer."""
    closed = False

    def print_event(event: Any) -> None:
        nonlocal closed
        line = line_of(event)
        if line is None or closed:
            return
        stream = out or sys.stdout
        try:
            print(line, file=stream, flush=True)
        except BrokenPipeError:
            closed = True
            discard_output(stream)
            if on_closed is not None:
                on_closed()

    return print_event


def discard_output(stream: TextIO) -> None:
    """Point a stream whose reader has gone at /dev/null, so that what is still buffered (and
    Python's flush at exit) goes nowhere instead of raising again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, io.UnsupportedOperation):
        pass
