"""Picking a run up from its directory after the process died (or stopped).

`state.json` holds the run's state as of event `seq`, written whole at every turn's end (one
of an older Ouroboros is brought to today's schema by store/state_file.py); the events after
it say what happened since, and bring it forward: the reply of the turn the process died
in and the results its calls had (their full text is in the observation files), by
rebuild.replay_tail; the digest, by `fold`. A tool call that started (its `tool_call` event
is after `seq`) but has no result gets a result saying it was interrupted; calls that never
started are simply run; a reply never logged is asked for again.

The log is the source of truth: a state that is missing, or damaged (it does not validate),
is rebuilt from it (see rebuild.py), and `Recovered.rebuilt` says why. Anything else raised
while reading it back is a bug, and is raised.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ouroboros.config import ContextConfig
from ouroboros.errors import UsageError
from ouroboros.loop.handoff import Digest
from ouroboros.loop.rebuild import rebuild_state, replay_tail, setting
from ouroboros.loop.reload import recorded_config
from ouroboros.loop.state import RunState
from ouroboros.protocols import ToolCall
from ouroboros.store.events import FORMAT_VERSION, EventBase, ToolCallEvent
from ouroboros.store.files import open_regular
from ouroboros.store.log import EVENTS_FILE, RunTail, parse_records, read_tail, run_records
from ouroboros.store.observations import OBSERVATIONS_DIR, ObservationStore
from ouroboros.store.segments import closed_records
from ouroboros.store.state_file import (
    STATE_FILE,
    DamagedSnapshot,
    ObservationReader,
    read_state,
    upgrade,
)
from ouroboros.store.summary import RunSummary
from ouroboros.window.conversation import pending_calls


@dataclass
class Recovered:
    state: RunState
    seq: int  # the last whole event in the log; the log continues after it
    interrupted: list[ToolCall] = field(default_factory=list)
    torn_line: str | None = None
    valid_bytes: int = 0
    config: dict[str, Any] = field(default_factory=dict)  # what the run last ran with
    rebuilt: str | None = None  # why the state was rebuilt from the log, if it was
    repaired: str | None = None  # why the manifest was rebuilt from the segments, if it was
    tail: RunTail | None = None  # the manifest and current segment the log continues


def started_ids(events: list[EventBase], after_seq: int) -> set[str]:
    return {e.id for e in events if isinstance(e, ToolCallEvent) and e.seq > after_seq}


def recover(run_dir: Path, policy: ContextConfig, system_prompt: str = "") -> Recovered:
    """Read a run back, under the `[context]` policy configured now. Raises UsageError when
    it should not be resumed, StateError when its log cannot be read. `system_prompt` opens
    the conversation if it has to be rebuilt from the log. What is read is the manifest, the
    state and the records after it (the current segment, as a rule): not the history."""
    tail = read_tail(run_dir)
    summary = tail.summary()
    if summary.run_start is None and not tail.last_seq:
        raise UsageError(f"{run_dir} has an empty log; start a new run with `ouroboros run`")
    version = (summary.run_start or {}).get("format_version", 0)
    if version > FORMAT_VERSION:
        raise UsageError(
            f"{run_dir / EVENTS_FILE} was written by a newer Ouroboros (format "
            f"{version}, this one reads {FORMAT_VERSION}); upgrade to resume it"
        )
    read = observation_reader(run_dir)
    state, seq, after, rebuilt = saved_state(run_dir, tail, policy, read)
    if state is None:  # rebuilt from the whole log
        events = parse_records(list(run_records(run_dir, tail=tail)), run_dir / EVENTS_FILE)
        state, seq = rebuild_state(events, run_dir.name, policy, system_prompt, read)
        if tail.manifest.pruned:  # the records before the kept ones count too
            state.total_turns = max(state.total_turns, summary.turns)
            state.restarts = max(state.restarts, summary.restarts)
        fold(state.digest, events)
    else:
        # `after` is parsed for the digest apart: a schema-1 state's digest is as of the
        # file's own seq, and the records since then may start before `seq` (SavedState)
        fold(
            state.digest,
            parse_records([r for r in after if r["type"] in DIGESTED], run_dir / EVENTS_FILE),
        )
        needed = {
            r["seq"]: r
            for r in config_records(summary) + after
            if r["seq"] > seq or r["type"] in ("run_start", "config_changed")
        }
        events = parse_records(
            sorted(needed.values(), key=lambda r: r["seq"]), run_dir / EVENTS_FILE
        )
        continue_message = setting(recorded_config(events), "agent", "continue_message")
        replay_tail(state, [e for e in events if e.seq > seq], read, continue_message)
    started = started_ids(events, seq)
    interrupted = [call for call in pending_calls(state.messages) if call.id in started]
    return Recovered(
        state,
        tail.last_seq,
        interrupted,
        tail.current.torn_line,
        tail.current.valid_bytes,
        recorded_config(events),
        rebuilt,
        tail.manifest.problem,
        tail,
    )


DIGESTED = frozenset({"assistant", "tool_call", "tool_result", "session_restart"})


def fold(digest: Digest, events: list[EventBase]) -> None:
    """Bring the run's digest forward by the events logged after the state it came with."""
    for event in events:
        digest.take(event)


def records_after(tail: RunTail, seq: int) -> list[dict[str, Any]]:
    """The records after event `seq`: the current segment's, and a closed segment's only
    when the state is older than the current segment."""
    if seq >= tail.manifest.last_seq:
        return [r for r in tail.records if r["seq"] > seq]
    return list(closed_records(tail.run_dir, tail.manifest, seq)) + tail.records


def config_records(summary: RunSummary) -> list[dict[str, Any]]:
    """The records that say the config the run last ran with, in order."""
    return (
        [summary.run_start, *summary.config_changes]
        if summary.run_start
        else list(summary.config_changes)
    )


def saved_state(
    run_dir: Path, tail: RunTail, policy: ContextConfig, read: ObservationReader
) -> tuple[RunState | None, int, list[dict[str, Any]], str | None]:
    """The state state.json holds (brought to today's schema), the seq it is as of, and the
    records the log has after the seq it was written as of; (None, 0, [], why) when it is
    missing or damaged, and has to be rebuilt."""
    try:
        saved = read_state(run_dir)
        if saved is None:
            return None, 0, [], f"{STATE_FILE} is missing"
        if saved.seq > tail.last_seq:  # a power cut kept the state, not the log's end
            raise DamagedSnapshot(
                f"is ahead of the log (as of event {saved.seq}; the log ends at {tail.last_seq})"
            )
        after = records_after(tail, saved.seq)
        saved = upgrade(saved, after, read)
        return RunState.from_dict(saved.state, policy), saved.seq, after, None
    except DamagedSnapshot as damage:
        return None, 0, [], f"{STATE_FILE} {damage}"


def observation_reader(run_dir: Path) -> ObservationReader:
    """Reads a result's full text back by its observation id, as written ("\r\n" stays)."""
    return ObservationStore(run_dir / OBSERVATIONS_DIR).read


def rebuilt_warning(why: str, state: RunState) -> str:
    """The warning a resume logs when it rebuilt the state from the log."""
    return (
        f"{why}: the conversation was rebuilt from {EVENTS_FILE} ({state.total_turns} "
        f"turns, session {state.session}); what the session carried over from the one "
        "before is not in the log, so the agent relies on its files for it"
    )


def drop_torn_line(run_dir: Path, valid_bytes: int) -> None:
    """Cut a half-written last record off the log so new events start on a fresh line."""
    fd = open_regular(run_dir / EVENTS_FILE, os.O_WRONLY)
    try:
        os.ftruncate(fd, valid_bytes)
    finally:
        os.close(fd)
