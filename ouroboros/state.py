"""What a run carries from step to step: the state a resume needs back, and the stop flag."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ouroboros.config import ContextConfig
from ouroboros.context import ContextManager
from ouroboros.protocols import EventSink, Message


@dataclass
class StopFlag:
    """Set by the first Ctrl+C or SIGTERM (or by whoever runs the harness): the current turn
    finishes, then the run stops with the reason given."""

    reason: str | None = None

    @property
    def requested(self) -> bool:
        return self.reason is not None

    def request(self, reason: str) -> None:
        self.reason = self.reason or reason


Reload = Literal["", "requested", "wound_down"]


@dataclass
class RunState:
    """Everything a resumed run needs back; saved as the snapshot after every step."""

    run_id: str
    messages: list[Message]
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

    def warn_once(self, log: EventSink, key: str, message: str) -> None:
        """A `warning` event, the first time this run meets `key`."""
        if key not in self.warned:
            self.warned.append(key)
            log.emit("warning", message=message)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["context"] = self.context.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], policy: ContextConfig) -> RunState:
        data = dict(data)
        data["context"] = ContextManager.from_dict(data["context"], policy)
        return cls(**data)
