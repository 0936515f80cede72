"""Picking a run up from its directory after the process died (or stopped).

The snapshot (`state.json`) holds the conversation and counters as of event `seq`; the
`checkpoint` events after it hold what each step changed since (journal.py), and the events
after the last of them say what happened since. The only thing that can be in flight at a
crash is a tool call: one that started (its `tool_call` event was written) but has no result
in the saved state gets a result saying it was interrupted. Calls that never started are
simply run.

The log is the source of truth: a snapshot that is damaged, empty or missing is rebuilt from
it (see rebuild.py), and `Recovered.rebuilt` says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ouroboros.config import ContextConfig
from ouroboros.errors import UsageError
from ouroboros.loop.handoff import Digest
from ouroboros.loop.journal import replay
from ouroboros.loop.rebuild import rebuild_state, restore_results
from ouroboros.loop.reload import recorded_config
from ouroboros.loop.state import RunState
from ouroboros.protocols import ToolCall
from ouroboros.store.events import FORMAT_VERSION, EventBase, ToolCallEvent
from ouroboros.store.log import (
    EVENTS_FILE,
    SNAPSHOT_FILE,
    DamagedSnapshot,
    RunTail,
    parse_records,
    read_snapshot,
    read_tail,
    run_records,
)
from ouroboros.store.observations import OBSERVATIONS_DIR, ObservationStore
from ouroboros.store.segments import closed_records
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
    snapshot and the records after it (the current segment, as a rule): not the history."""
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
    after = records_after(tail, snapshot_seq(run_dir))
    state, seq, rebuilt = saved_state(run_dir, policy, after, read)
    if state is None:  # rebuilt from the whole log
        events = parse_records(list(run_records(run_dir, tail=tail)), run_dir / EVENTS_FILE)
        state, seq = rebuild_state(events, run_dir.name, policy, system_prompt, read)
        if tail.manifest.pruned:  # the records before the kept ones count too
            state.total_turns = max(state.total_turns, summary.turns)
            state.restarts = max(state.restarts, summary.restarts)
        fold(state.digest, events)
    else:
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
        seq = restore_results(state, events, seq, read)
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


def snapshot_seq(run_dir: Path) -> int:
    """The seq the snapshot is as of (0 when there is none or it is damaged: then every
    record is needed)."""
    try:
        snapshot = read_snapshot(run_dir)
    except DamagedSnapshot:
        return 0
    return snapshot["seq"] if snapshot is not None else 0


def records_after(tail: RunTail, seq: int) -> list[dict[str, Any]]:
    """The records after event `seq`: the current segment's, and a closed segment's only
    when the snapshot is older than the current segment."""
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
    run_dir: Path,
    policy: ContextConfig,
    events: list[dict[str, Any]],
    read: Callable[[str], str | None],
) -> tuple[RunState | None, int, str | None]:
    """The snapshot's state brought forward by the checkpoints logged after it, and the seq
    it is now as of; (None, 0, why) when it has to be rebuilt."""
    try:
        snapshot = read_snapshot(run_dir)
        if snapshot is None:
            return None, 0, f"{SNAPSHOT_FILE} is missing"
        state, seq = replay(snapshot, events, read)
        return RunState.from_dict(state, policy), seq, None
    except DamagedSnapshot as damage:
        return None, 0, f"{SNAPSHOT_FILE} {damage}"
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        return None, 0, f"{SNAPSHOT_FILE} does not hold a run's state"


def observation_reader(run_dir: Path) -> Callable[[str], str | None]:
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
    with (run_dir / EVENTS_FILE).open("r+b") as f:
        f.truncate(valid_bytes)
