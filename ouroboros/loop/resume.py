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
from ouroboros.store.log import (
    EVENTS_FILE,
    SNAPSHOT_FILE,
    DamagedSnapshot,
    parse_records,
    read_events,
    read_snapshot,
)
from ouroboros.store.observations import OBSERVATIONS_DIR, ObservationStore
from ouroboros.store.events import FORMAT_VERSION, EventBase, ToolCallEvent
from ouroboros.window.conversation import pending_calls
from ouroboros.loop.journal import replay
from ouroboros.protocols import ToolCall
from ouroboros.loop.rebuild import rebuild_state, restore_results
from ouroboros.loop.reload import recorded_config
from ouroboros.loop.state import RunState

CONFIG_RECORDS = ("run_start", "config_changed")  # what recorded_config reads

@dataclass
class Recovered:
    state: RunState
    seq: int  # the last whole event in the log; the log continues after it
    interrupted: list[ToolCall] = field(default_factory=list)
    torn_line: str | None = None
    valid_bytes: int = 0
    config: dict[str, Any] = field(default_factory=dict)  # what the run last ran with
    rebuilt: str | None = None  # why the state was rebuilt from the log, if it was


def started_ids(events: list[EventBase], after_seq: int) -> set[str]:
    return {e.id for e in events if isinstance(e, ToolCallEvent) and e.seq > after_seq}


def recover(run_dir: Path, policy: ContextConfig, system_prompt: str = "") -> Recovered:
    """Read a run back, under the `[context]` policy configured now. Raises UsageError when
    it should not be resumed, StateError when its log cannot be read. `system_prompt` opens
    the conversation if it has to be rebuilt from the log."""
    log = read_events(run_dir / EVENTS_FILE)
    records = log.events
    if not records:
        raise UsageError(f"{run_dir} has an empty log; start a new run with `ouroboros run`")
    version = records[0].get("format_version", 0)
    if version > FORMAT_VERSION:
        raise UsageError(f"{run_dir / EVENTS_FILE} was written by a newer Ouroboros (format "
                         f"{version}, this one reads {FORMAT_VERSION}); upgrade to resume it")
    read = observation_reader(run_dir)
    state, seq, rebuilt = saved_state(run_dir, policy, records, read)
    # What the snapshot holds is read back through its checkpoints (journal.py): only the
    # records after it, and those that say the config, are needed as events.
    needed = records if state is None else [r for r in records if r["seq"] > seq
                                            or r["type"] in CONFIG_RECORDS]
    events = parse_records(needed, run_dir / EVENTS_FILE)
    if state is None:
        state, seq = rebuild_state(events, run_dir.name, policy, system_prompt, read)
    else:
        seq = restore_results(state, events, seq, read)
    started = started_ids(events, seq)
    interrupted = [call for call in pending_calls(state.messages) if call.id in started]
    return Recovered(state, records[-1]["seq"], interrupted, log.torn_line, log.valid_bytes,
                     recorded_config(events), rebuilt)


def saved_state(run_dir: Path, policy: ContextConfig, events: list[dict[str, Any]],
                read: Callable[[str], str | None]) -> tuple[RunState | None, int, str | None]:
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
    return (f"{why}: the conversation was rebuilt from {EVENTS_FILE} ({state.total_turns} "
            f"turns, session {state.session}); what the session carried over from the one "
            "before is not in the log, so the agent relies on its files for it")


def drop_torn_line(run_dir: Path, valid_bytes: int) -> None:
    """Cut a half-written last record off the log so new events start on a fresh line."""
    with (run_dir / EVENTS_FILE).open("r+b") as f:
        f.truncate(valid_bytes)

