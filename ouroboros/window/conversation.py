"""The conversation as data: the notes the harness writes into it, tool results as
observations (their placeholders and caps), turns, masking and what a restart carries over.

All pure functions, no I/O; the ContextManager (context.py) decides when to use them.

Vocabulary (see context.py for the window's): a *turn* is an assistant message and everything
after it up to the next assistant message (its tool results and any notes); turns are never
split. An *observation* is a tool result; masking replaces its content with a placeholder
that says what was there, while the message itself (and the call it answers) stays.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from ouroboros.window import ledger as tk
from ouroboros.protocols import Message, ToolCall, ToolResult

NOTE_KEY = "_note"  # marks messages the harness wrote; stripped before sending

_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)

Note = Literal["continue", "mask", "wind_down", "restart", "interrupted", "stuck", "handoff"]
Truncation = Literal["head", "tail", "both"]

INTERRUPTED_TEXT = (
    "[interrupted: the harness stopped while this {name} call was running, so it may or may "
    "not have taken effect. Check before repeating it.]"
)


def interrupted_text(tool_name: str) -> str:
    """The result of a call a stop or a crash cut short (it is not run again)."""
    return INTERRUPTED_TEXT.format(name=tool_name)


WIND_DOWN_TEXT = (
    "[Context nearly full: {pct:.0%} of the window is used. Save your progress and state to "
    "workspace files now (what is done, what is next, anything you would need to continue). "
    "The session will restart soon with a fresh context; only your files carry over.]"
)


# --- notes ----------------------------------------------------------------------------------


def note(kind: Note, text: str) -> Message:
    """A message the harness adds to the conversation (sent to the model as a user turn)."""
    return {"role": "user", "content": text, NOTE_KEY: kind}


def to_wire(messages: list[Message]) -> list[Message]:
    """The messages as the server should see them: without the harness's private keys."""
    return [{k: v for k, v in m.items() if not k.startswith("_")} for m in messages]


def without_reasoning(text: str) -> str:
    """Assistant text without its `<think>` blocks. Kept out of the history: templates strip
    earlier reasoning anyway (so counts would shrink unpredictably), and it costs tokens."""
    return _THINK.sub("", text).lstrip()


def restart_marker(session: int, previous_turns: int) -> Message:
    """The note a restarted session begins with, after the system prompt."""
    return note("restart", (
        f"[Session restarted. Session #{session}. The previous session ran {previous_turns} "
        "turns. Check your workspace files for saved progress.]"))


def mask_notice(count: int, reclaimed_pct: float) -> Message:
    """The note that tells the agent observations were masked."""
    return note("mask", f"[Context compressed: {count} observations masked, "
                        f"~{reclaimed_pct:.0f}% of the context reclaimed]")


# --- observations and placeholders ----------------------------------------------------------


@dataclass
class Observation:
    """What a placeholder needs to say about one tool result."""

    id: str
    tool_call_id: str
    tool: str
    target: str
    chars: int
    lines: int
    first_line: str
    exit_code: int | None = None
    truncated: bool = False
    masked: bool = False


def describe(tool: str, subject: str, result: ToolResult, obs_id: str,
             tool_call_id: str) -> Observation:
    """What a placeholder for this result of a call to `tool` will say; `subject` is what the
    call was about, as the tool names it (Toolbox.subject)."""
    meta = result.meta
    target = str(meta.get("path") or meta.get("command") or subject)
    text = result.content
    first_line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return Observation(
        id=obs_id,
        tool_call_id=tool_call_id,
        tool=tool,
        target=target,
        chars=len(text),
        lines=text.count("\n") + (1 if text and not text.endswith("\n") else 0),
        first_line=first_line,
        exit_code=meta.get("exit_code"),
    )


def human_size(chars: int) -> str:
    """A size for a person: bytes below 1 KB, else KB with one decimal."""
    if chars < 1024:
        return f"{chars} B"
    return f"{chars / 1024:.1f} KB"


def placeholder(obs: Observation) -> str:
    """The line a masked result becomes: what it was, and how to see it again."""
    parts = [obs.target] if obs.target else []
    parts += [f"{obs.lines} lines", human_size(obs.chars)]
    if obs.exit_code is not None:
        parts.append(f"exit code {obs.exit_code}")
    if obs.first_line:
        began = obs.first_line[:40] + ("..." if len(obs.first_line) > 40 else "")
        parts.append(f'began "{began}"')
    return (f"[{obs.tool} result masked: {', '.join(parts)}. "
            f'recall(id="{obs.id}") shows it again]')


def cap_text(text: str, max_chars: int, keep: Truncation, obs_id: str) -> tuple[str, int]:
    """Cut an oversized tool result to max_chars, keeping the head, the tail or both, with a
    line saying what was cut and how to get it back. Returns the text and the chars cut."""
    if len(text) <= max_chars:
        return text, 0
    cut = len(text) - max_chars
    marker = (f"[... {cut:,} characters cut ({keep} kept); "
              f'recall(id="{obs_id}", offset=N) reads the full output ...]')
    if keep == "head":
        return f"{text[:max_chars]}\n{marker}", cut
    if keep == "tail":
        return f"{marker}\n{text[-max_chars:]}", cut
    half = max_chars // 2
    return f"{text[:half]}\n{marker}\n{text[len(text) - (max_chars - half):]}", cut


# --- turns, masking, carryover --------------------------------------------------------------


def turn_starts(messages: list[Message]) -> list[int]:
    """Indexes of the assistant messages: each begins a turn that runs to the next one."""
    return [i for i, m in enumerate(messages) if m["role"] == "assistant"]


# Masking is worth it only for a result at least this many times its placeholder's size: a
# short result (a progress file, a one-line answer) is what the agent goes on, and hiding it
# frees next to nothing.
MASK_MIN_GAIN = 2


def worth_masking(message: Message, observations: dict[str, Observation]) -> str | None:
    """The tool-call id of a result whose observation is unmasked and, by the estimate (dense
    scripts counted as such), at least MASK_MIN_GAIN times as big as its placeholder; None
    for any other message."""
    if message["role"] != "tool":
        return None
    obs = observations.get(message.get("tool_call_id", ""))
    if obs is None or obs.masked:
        return None
    size = tk.estimate_text(message.get("content") or "", tk.DEFAULT_CHARS_PER_TOKEN)
    if size < MASK_MIN_GAIN * tk.estimate_text(placeholder(obs), tk.DEFAULT_CHARS_PER_TOKEN):
        return None
    return obs.tool_call_id


def unacted_turns(messages: list[Message], starts: list[int] | None = None) -> int:
    """How many turns at the end hold results the agent has not acted on yet: the newest
    (its results are not seen yet), and the one before it when a wind-down note came right
    after that one (the reply to the note saved state; the work on what that turn read is
    still to be done). `starts`: turn_starts(messages), if known."""
    starts = turn_starts(messages) if starts is None else starts
    if len(starts) < 2:
        return len(starts)
    between = messages[starts[-2] + 1:starts[-1]]
    return 2 if any(m.get(NOTE_KEY) == "wind_down" for m in between) else 1


def apply_masks(messages: list[Message], placeholders: dict[str, str]) -> list[Message]:
    """Replace the content of the named tool results (by tool-call id); nothing else changes."""
    return [
        {**tk.forget(m), "content": placeholders[m["tool_call_id"]]}
        if m["role"] == "tool" and m.get("tool_call_id") in placeholders else m
        for m in messages
    ]


def pending_calls(messages: list[Message]) -> list[ToolCall]:
    """Tool calls of the last assistant message that have no result yet."""
    last = next((i for i in range(len(messages) - 1, -1, -1)
                 if messages[i]["role"] == "assistant"), None)
    if last is None:
        return []
    answered = {m.get("tool_call_id") for m in messages[last + 1:] if m["role"] == "tool"}
    return [
        ToolCall(c["id"], c["function"]["name"], c["function"].get("arguments", ""))
        for c in messages[last].get("tool_calls") or ()
        if c["id"] not in answered
    ]


def carryover(messages: list[Message], turns: int) -> list[Message]:
    """The last `turns` complete turns, minus the harness's notes about the old window."""
    if turns <= 0:
        return []
    starts = turn_starts(messages)
    if not starts:
        return []
    kept = messages[starts[-turns] if len(starts) >= turns else starts[0]:]
    return [m for m in kept if m.get(NOTE_KEY) not in ("wind_down", "mask")]


def drop_oldest_turn(messages: list[Message], keep: int = 1) -> list[Message] | None:
    """Remove the oldest complete turn, never the preamble before it nor the newest `keep`
    turns. Returns None when there is nothing left that may go."""
    starts = turn_starts(messages)
    if len(starts) <= max(keep, 1):
        return None
    return messages[: starts[0]] + messages[starts[1]:]
