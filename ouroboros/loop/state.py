"""What a run carries from step to step: the state a resume needs back."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable, Literal

from ouroboros.config import ContextConfig
from ouroboros.loop.handoff import Digest
from ouroboros.protocols import EventSink
from ouroboros.store.events import WarningCleared, WarningEvent
from ouroboros.window.conversation import Conversation
from ouroboros.window.policy import ContextManager

__all__ = ["RunState"]


Reload = Literal["", "requested", "wound_down"]


@dataclass
class RunState:
    """Everything a resumed run needs back; saved as the snapshot after every step."""

    run_id: str
    messages: Conversation  # given as a list, it becomes one
    context: ContextManager
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
    # What the run did, folded from its log (handoff.py): the snapshot holds it, a resume
    # folds what was logged after the snapshot. Not in the checkpoints.
    digest: Digest = field(default_factory=Digest)

    def __post_init__(self) -> None:
        if not isinstance(self.messages, Conversation):  # one given is built with the judge
            self.messages = Conversation(self.messages, self.context.worth_masking)

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

    def to_dict(self) -> dict[str, Any]:
        """The state as the snapshot holds it. Shallow: the messages are shared, not copied
        (the snapshot is written at once; copying a long conversation would cost more CPU
        than the rest of the turn)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["messages"] = self.messages.messages
        data["context"] = self.context.to_dict()
        data["digest"] = self.digest.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], policy: ContextConfig) -> RunState:
        data = dict(data)
        data["context"] = ContextManager.from_dict(data["context"], policy)
        data["digest"] = Digest.from_dict(data.get("digest"))
        return cls(**data)
