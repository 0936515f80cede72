"""What a run carries from turn to turn: the state a resume needs back, written whole at
every turn's end (store/state_file.py); a resume brings it forward by the events logged
after it (loop/rebuild.py's replay_tail).

    save_state(state, log, writer, durable=True, turn_end=True)  # once the log is durable
    save_state(state, log, writer, durable=True)     # a session boundary, the end
    save_state(state, log, writer)                   # a person's message, a call cut short
"""

from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, field, fields
from operator import attrgetter
from typing import Any, Callable, Literal

from ouroboros.config import ContextConfig
from ouroboros.loop.handoff import Digest
from ouroboros.loop.memory import SystemMarks, SystemPrompt
from ouroboros.protocols import EventSink, RunLog
from ouroboros.store.events import WarningCleared, WarningEvent
from ouroboros.store.state_file import DamagedSnapshot, GrowingMemo, Growth, StateWriter
from ouroboros.window.belief import Window
from ouroboros.window.conversation import Conversation, Observation, Record
from ouroboros.window.ledger import Calibration
from ouroboros.window.manager import ContextManager, LastCount
from ouroboros.window.plain import flat

__all__ = ["RunState", "save_state"]


Reload = Literal["", "requested", "wound_down"]
# What a resume brings forward from the events logged after the state (rebuild.replay_tail,
# resume.fold), or learns again: the turn counters and tokens, the digest; of the context,
# the largest count taken whole (its window's `accepted`), the counts' calibration and how
# many were taken (the probes' cadence); and the seconds run (a kill loses those of the
# turns since the state, as it always lost those of the turn it cut). The conversation and
# the observations come back while they only grow.
REPLAYED = frozenset(
    {"session_turns", "total_turns", "session_successes", "tokens_used", "wall_secs", "digest"}
)
REPLAYED_CONTEXT = frozenset(
    {"calibration", "last_count", "next_observation", "notes", "wound_down", "counts_taken"}
)


@dataclass
class RunState:
    """Everything a resumed run needs back; written whole at every turn's end."""

    run_id: str
    messages: Conversation  # given as a list (of messages or Records), it becomes one
    context: ContextManager
    # What the system prompt (messages[0]) is made of (memory.py); None: not known.
    system_marks: SystemMarks | None = None
    session: int = 1
    session_turns: int = 0
    total_turns: int = 0
    restarts: int = 0
    session_successes: int = 0  # tool calls that succeeded in this session
    barren_sessions: int = 0  # sessions in a row that ended without one
    warned: list[str] = field(default_factory=list)
    # An early end of the session asked for (SIGHUP, `ouroboros reload`): "requested", then
    # "wound_down" once the agent was told to save its state; cleared by the restart.
    reload: Reload = ""
    idle_turns: int = 0  # turns in a row without a tool call
    # A user instruction from `ouroboros resume --message`, given at the next session start.
    instruction: str = ""
    # The run's budgets so far (budgets.py): tokens as the server counted them, seconds run.
    tokens_used: int = 0
    wall_secs: float = 0.0
    # What the run did, folded from its log (handoff.py): the state holds it, a resume
    # folds what was logged after the state.
    digest: Digest = field(default_factory=Digest)

    def __post_init__(self) -> None:
        if not isinstance(self.messages, Conversation):  # one given is built with the judge
            self.messages = Conversation(self.messages, self.context.worth_masking)
        self._saved_observations = SavedObservations()  # not a field: to_dict's, not saved

    @property
    def system_prompt(self) -> SystemPrompt:
        """The system message and its marks."""
        return SystemPrompt(self.messages[0], self.system_marks)

    def replace_system(self, prompt: SystemPrompt) -> bool:
        """The system prompt as it is now: its marks, and its message if its text changed
        (then True)."""
        self.system_marks = prompt.marks
        if prompt.message.get("content") == self.messages[0].get("content"):
            return False
        self.messages.replace_system(prompt.message)
        return True

    def warn_once(self, log: EventSink, key: str, message: str) -> None:
        """A `warning` event, the first time this run meets `key`."""
        if key not in self.warned:
            self.warned.append(key)
            log.emit(WarningEvent(message=message, condition=key))

    def clear_warnings(self, log: EventSink, keys: Callable[[str], bool], message: str) -> None:
        """A `warning_cleared` event for each warning whose key `keys` picks: its condition
        is over (and may be warned about again if it comes back)."""
        for key in [key for key in self.warned if keys(key)]:
            self.warned.remove(key)
            log.emit(WarningCleared(condition=key, message=message))

    def growth(self) -> Growth:
        """The state in brief, for whether a turn's end may leave its write to a later one
        (store/state_file.py): what is not brought back from the log (REPLAYED) costs a
        small encoding; the conversation and the observations are not looked at."""
        steady = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("messages", "context", "digest") and f.name not in REPLAYED
        }
        steady["system_marks"] = flat(self.system_marks) if self.system_marks else None
        context = self.context.to_dict(observations={})
        steady["context"] = {k: v for k, v in context.items() if k not in REPLAYED_CONTEXT}
        steady["context"]["window"].pop("accepted")
        conversation = self.messages
        return Growth(conversation.edits, conversation.appended, json.dumps(steady, default=str))

    def to_dict(self) -> dict[str, Any]:
        """The state as state.json holds it: the messages as sent, and beside them each
        one's measured size (`tokens`) and note kind (`notes`), by position, and what the
        system prompt is made of (`system_marks`). Shallow: the messages are shared, not
        copied (the state is written at once; copying a long conversation would cost more
        CPU than the rest of the turn)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["messages"] = self.messages.messages
        data["tokens"] = self.messages.tokens
        data["notes"] = self.messages.notes[:]
        marks = self.system_marks
        data["system_marks"] = flat(marks) if marks is not None else None
        data["context"] = self.context.to_dict(
            self._saved_observations.of(self.context.observations)
        )
        data["digest"] = self.digest.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], policy: ContextConfig) -> RunState:
        """The state of a state.json whose shape store/state_file.py checked. Raises
        DamagedSnapshot when a part of it is not what the object it is read into takes."""
        data = dict(data)
        tokens, notes = data.pop("tokens", None), data.pop("notes", None)
        check_fields(cls, data, "state")
        if (marks := data.get("system_marks")) is not None:
            check_fields(SystemMarks, marks, "state.system_marks")
            data["system_marks"] = SystemMarks(**marks)
        if tokens is not None and notes is not None:  # of the length checked with the shape
            data["messages"] = list(map(Record, data["messages"], notes, tokens))
        context = data["context"]
        # ContextManager.from_dict reads the calibration and observations itself
        check_fields(ContextManager, context, "state.context", ("policy",), ("calibration",))
        check_fields(Window, context["window"], "state.context.window")
        check_fields(Calibration, context["calibration"], "state.context.calibration")
        if context.get("last_count") is not None:
            check_fields(LastCount, context["last_count"], "state.context.last_count")
        for key, observation in context["observations"].items():
            check_fields(Observation, observation, f"state.context.observations.{key}")
        data["context"] = ContextManager.from_dict(context, policy)
        data["digest"] = Digest.from_dict(data.get("digest"))
        return cls(**data)


class SavedObservations:
    """Each observation's saved dict, made once (store/state_file.py's GrowingMemo): only its
    `masked` changes after it is made (ContextManager.masked), and then it is made again.
    One per run (its RunState's)."""

    def __init__(self) -> None:
        self._dicts: GrowingMemo[Observation, dict[str, Any]] = GrowingMemo(
            lambda _key, obs: flat(obs)
        )

    def of(self, observations: dict[str, Observation]) -> dict[str, dict[str, Any]]:
        held = list(observations.values())
        marks = list(zip(held, map(_MASKED, held)))  # the same object, as masked as it was
        return dict(zip(observations, self._dicts.update(observations, marks)))


_MASKED = attrgetter("masked")


def check_fields(
    kind: type, data: Any, where: str, given: tuple[str, ...] = (), needed: tuple[str, ...] = ()
) -> None:
    """DamagedSnapshot unless `data` is a dict of the dataclass `kind`'s fields: each it
    requires and each `needed`, but those `given` apart; none it does not have."""
    if not isinstance(data, dict):
        raise DamagedSnapshot(f"does not hold a run's state ({where}: not an object)")
    names = {f.name for f in fields(kind) if f.init} - set(given)
    required = {
        f.name
        for f in fields(kind)
        if f.init and f.default is MISSING and f.default_factory is MISSING
    }
    required = (required | set(needed)) - set(given)
    if missing := sorted(required - data.keys()):
        raise DamagedSnapshot(f"does not hold a run's state ({where}: no {', '.join(missing)})")
    if unknown := sorted(data.keys() - names):
        raise DamagedSnapshot(
            f"does not hold a run's state ({where}: unknown {', '.join(unknown)})"
        )


def save_state(
    state: RunState,
    log: RunLog,
    writer: StateWriter,
    *,
    durable: bool = False,
    turn_end: bool = False,
) -> None:
    """Write the state whole, as of the last event logged: `durable` at a turn's end, a
    session boundary and the end, once the log is durable up to it (so that the state on
    disk never names an event the log on disk may not have); not durable at the steps the
    log cannot replay (a person's message, a call a stop cut short), unless
    `logging.durability = "event"` makes the log durable at every event. What happens
    within a turn (its reply, its results) is replayed from the log on a resume, so a turn
    costs one write. Each costs what the state holds, which the window bounds (see
    store/state_file.py), not what the run has done; at a `turn_end` a large state that
    only grew by what the log replays is written once its growth is worth a write
    (StateWriter.may_wait), so a turn in a large window costs what it added."""
    durable = durable or log.durability == "event"
    if turn_end and durable and writer.may_wait(state.growth):
        return
    writer.write(log.seq, state.to_dict(), log.redact, durable=durable, growth=state.growth)
