"""Picking a run up from its directory after the process died (or stopped).

The snapshot (`state.json`) holds the conversation and counters as of event `seq`; the events
after it say what happened since. The only thing that can be in flight at a crash is a tool
call: one that started (its `tool_call` event was written) but has no result in the snapshot
gets a result saying it was interrupted. Calls that never started are simply run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ouroboros.config import ContextConfig
from ouroboros.errors import UsageError
from ouroboros.events import EVENTS_FILE, FORMAT_VERSION, read_events, read_snapshot
from ouroboros.context import pending_calls
from ouroboros.protocols import ToolCall
from ouroboros.reload import recorded_config
from ouroboros.state import RunState

INTERRUPTED_TEXT = (
    "[interrupted: the harness stopped while this {name} call was running, so it may or may "
    "not have taken effect. Check before repeating it.]"
)


@dataclass
class Recovered:
    state: RunState
    seq: int  # the last whole event in the log; the log continues after it
    interrupted: list[ToolCall] = field(default_factory=list)
    torn_line: str | None = None
    valid_bytes: int = 0
    config: dict[str, Any] = field(default_factory=dict)  # what the run last ran with


def started_ids(events: list[dict[str, Any]], after_seq: int) -> set[str]:
    return {e["id"] for e in events if e["type"] == "tool_call" and e["seq"] > after_seq}


def recover(run_dir: Path, policy: ContextConfig) -> Recovered:
    """Read a run back, under the `[context]` policy configured now. Raises UsageError when
    it cannot or should not be resumed."""
    log = read_events(run_dir / EVENTS_FILE)
    events = log.events
    if not events:
        raise UsageError(f"{run_dir} has an empty log; start a new run with `ouroboros run`")
    version = events[0].get("format_version", 0)
    if version > FORMAT_VERSION:
        raise UsageError(f"{run_dir / EVENTS_FILE} was written by a newer Ouroboros (format "
                         f"{version}, this one reads {FORMAT_VERSION}); upgrade to resume it")
    if events[-1]["type"] == "run_end" and events[-1].get("resumable") is False:
        raise UsageError(f"run {run_dir.name} ended cleanly ({events[-1].get('reason')}); "
                         "start a new one with `ouroboros run`")
    snapshot = read_snapshot(run_dir)
    if snapshot is None:
        raise UsageError(f"run {run_dir.name} has no saved state yet (it died before its first "
                         "turn); start a new one with `ouroboros run`")
    state = RunState.from_dict(snapshot["state"], policy)
    started = started_ids(events, snapshot["seq"])
    interrupted = [call for call in pending_calls(state.messages) if call.id in started]
    return Recovered(state, events[-1]["seq"], interrupted, log.torn_line, log.valid_bytes,
                     recorded_config(events))


def drop_torn_line(run_dir: Path, valid_bytes: int) -> None:
    """Cut a half-written last record off the log so new events start on a fresh line."""
    with (run_dir / EVENTS_FILE).open("r+b") as f:
        f.truncate(valid_bytes)


def interrupted_text(tool_name: str) -> str:
    return INTERRUPTED_TEXT.format(name=tool_name)
