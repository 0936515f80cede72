"""Plain, greppable lines: one per event, for --headless, pipes and `ouroboros logs`; control
characters from the model or a tool are shown, never sent raw (ui/sanitize.py)."""

from __future__ import annotations

import io
import json
import os
import sys
from typing import Any, Callable, Iterable, TextIO

from ouroboros.errors import UsageError
from ouroboros.ui.sanitize import neutralise

EVENT_TYPES = (
    "run_start", "run_resumed", "session_start", "assistant", "tool_call", "tool_result",
    "token_usage", "context_mask", "context_drop", "wind_down", "session_restart",
    "context_truncation_detected", "context_overflow_recovered", "retry", "security",
    "warning", "error", "idle", "stop_requested", "reload_requested", "config_changed",
    "checkpoint", "session_end", "run_end",
)
"""Every event type the harness writes, in roughly the order a run meets them."""


def select_types(types: Iterable[str]) -> set[str]:
    """The event types asked for (`logs --type`), checked against the known ones."""
    wanted = set(types)
    unknown = sorted(wanted - set(EVENT_TYPES))
    if unknown:
        raise UsageError(f"unknown event type {', '.join(unknown)}; known types: "
                         + ", ".join(EVENT_TYPES))
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


def sandbox_note(e: dict[str, Any]) -> str:
    """What confines the shell, as `run_start` and `run_resumed` record it."""
    sandbox = e.get("sandbox")
    return f"; sandbox: {sandbox['summary']}" if isinstance(sandbox, dict) else ""


def describe(e: dict[str, Any]) -> str | None:
    """The text of one event, or None for events not worth a line of their own."""
    t = e["type"]
    match t:
        case "run_start":
            return (f"run {e['run_id']} started (ouroboros {e.get('version', '?')})"
                    + sandbox_note(e))
        case "run_resumed":
            extra = ", torn last log line dropped" if e.get("torn_line_dropped") else ""
            interrupted = e.get("interrupted_tools") or []
            if interrupted:
                extra += f", interrupted tool calls: {', '.join(interrupted)}"
            return (f"run resumed at turn {e['total_turns']} ({e['restarts']} restarts{extra})"
                    + sandbox_note(e))
        case "session_start":
            return (f"session {e['session']} started: context limit {e['context_limit']} "
                    f"tokens ({e['limit_source']}), budget {e['budget']}, "
                    f"{e['carryover_messages']} messages carried over")
        case "assistant":
            calls = ", ".join(c["name"] for c in e.get("tool_calls") or [])
            text = one_line(e.get("text") or "")
            return f"assistant: {text}" + (f" -> {calls}" if calls else "") if text or calls \
                else "assistant: (empty reply)"
        case "tool_call":
            return f"tool {tool_call_text(e['name'], e.get('arguments', ''))}"
        case "tool_result":
            status = "ok" if e["ok"] else "FAILED"
            cut = ", truncated" if e.get("truncated") else ""
            return (f"  -> {e['name']} {status}: {one_line(e.get('summary', ''), 100)} "
                    f"({e['bytes']} bytes, {e['duration_ms']} ms{cut})")
        case "token_usage":
            cached = f", {e['cached_tokens']} cached" if e.get("cached_tokens") else ""
            return (f"context {e['prompt_tokens']}/{e['budget']} tokens "
                    f"({e['context_used_pct']}%, {e['source']}{cached}), "
                    f"+{e['completion_tokens']} completion")
        case "context_mask":
            return (f"masked {plural(e['observations_masked'], 'tool result')} "
                    f"({e['tokens_before']} -> {e['tokens_after']} tokens, "
                    f"{e['reclaimed_pct']}% reclaimed; {e['total_masked']} masked in total)")
        case "context_drop":
            return f"dropped {e['turns_dropped']} oldest turns to fit the window"
        case "wind_down":
            return f"wind-down: context at {e['context_used_pct']}%, agent asked to save state"
        case "session_restart":
            return (f"restart -> session {e['session']} ({e['reason']}; previous session ran "
                    f"{e['previous_turns']} turns, {e['carryover_messages']} messages carried)")
        case "context_truncation_detected":
            return (f"WARNING the server cuts prompts: its counts stalled near {e['reported']} "
                    f"tokens while ~{e['estimated']} were sent; limit now {e['new_limit']}")
        case "context_overflow_recovered":
            return f"prompt refused as too long ({e['error']}); limit now {e['new_limit']}"
        case "retry":
            return f"retry {e['attempt']} in {e['delay_secs']}s: {e['error']}"
        case "security":
            detail = e.get("path") or e.get("command") or ""
            return f"SECURITY {e['kind']} in {e.get('tool', '?')}: {detail}"
        case "warning":
            return f"WARNING {e['message']}"
        case "error":
            return f"ERROR {e['message']}"
        case "idle":
            return (f"no tool call in {e['idle_turns']} turns in a row: the continue message "
                    f"goes in {e['pause_secs']:g}s (the run pauses after "
                    f"{e['max_idle_turns']})")
        case "stop_requested":
            return (f"{e['signal']}: stopping now (what was waited on is cancelled; the run "
                    "stays resumable)")
        case "reload_requested":
            return ("reload requested: the session ends after a wind-down, and the next one "
                    "reads the config again")
        case "config_changed":
            return (f"config changed: {e['key']} {json.dumps(e['old'])} -> "
                    f"{json.dumps(e['new'])} ({e['source']})")
        case "session_end":
            return None
        case "run_end":
            summary = f": {one_line(e['summary'], 200)}" if e.get("summary") else ""
            then = f"; {e['next']}" if e.get("next") else ""
            return (f"run ended: {e['reason']}{summary} after {e['total_turns']} turns, "
                    f"{e['sessions']} sessions, {e['restarts']} restarts (exit "
                    f"{e['exit_code']}){then}")
    return None


def masked_text(results: int, rounds: int) -> str:
    """The one wording for masking in `status`, `stats` and `logs`: a masking round replaces
    the oldest tool results with placeholders (a restart may mask some more to fit what it
    carries over). "5 tool results masked (2 masking rounds)"."""
    return f"{plural(results, 'tool result')} masked ({plural(rounds, 'masking round')})"


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def format_line(e: dict[str, Any]) -> str | None:
    text = describe(e)
    if text is None:
        return None
    clock = e["ts"][11:19]
    return neutralise(f"{clock} s{e['session']} t{e['turn']} {text}")


def format_any(e: dict[str, Any]) -> str:
    """Like format_line, but every event gets a line: the quiet ones show their fields."""
    line = format_line(e)
    if line is not None:
        return line
    skip = ("type", "ts", "seq", "session", "turn")
    fields = " ".join(f"{k}={one_line(str(v), 60)}" for k, v in e.items() if k not in skip)
    return neutralise(f"{e['ts'][11:19]} s{e['session']} t{e['turn']} {e['type']} {fields}"
                      .rstrip())


def plain_printer(out: TextIO | None = None, *, on_closed: Callable[[], None] | None = None
                  ) -> Callable[[dict[str, Any]], None]:
    """A listener printing format_line to `out` (default: sys.stdout at the time of printing).
    When the reader goes away (a broken pipe), printing stops and `on_closed` is called once."""
    closed = False

    def print_event(e: dict[str, Any]) -> None:
        nonlocal closed
        line = format_line(e)
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
