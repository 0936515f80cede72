"""The seams: the data that crosses module boundaries and the interfaces everything depends on.

Messages are plain dicts in the OpenAI chat format, exactly as they go over the wire and into
the log, so nothing needs converting between the conversation, the request and a snapshot.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, AbstractSet, Any, Awaitable, Callable, Iterable, Literal, Protocol

if TYPE_CHECKING:
    from ouroboros.store.events import EventBase

Message = dict[str, Any]


def call_ids_in(messages: Iterable[dict[str, Any]]) -> set[str]:
    """Every tool-call id a conversation already uses (in calls and in results)."""
    taken = set()
    for message in messages:
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                taken.add(call["id"])
        if isinstance(message.get("tool_call_id"), str):
            taken.add(message["tool_call_id"])
    return taken


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # the JSON text as the model sent it; may not parse
    cut_off: bool = False  # the reply ended at max_tokens before the arguments were whole

    def to_wire(self) -> dict[str, Any]:
        """The call as the history sends it back: arguments that are not a JSON object go as
        `{}` (servers refuse the whole request over them: llama.cpp with a 500, Ollama a
        400); the text as sent stays in the log and in the result that answers it."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": wire_arguments(self.arguments)},
        }


def wire_arguments(arguments: str) -> str:
    """`arguments` when they are a JSON object, else "{}".

        wire_arguments('{"path": "a"}')   # '{"path": "a"}'
        wire_arguments('{"path": "no')    # '{}'
    """
    return arguments if is_json_object(arguments) else "{}"


def is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


@dataclass(frozen=True)
class Usage:
    """What the server said the request cost. A count that is absent, null or 0 is None:
    unknown, not zero (Ollama reports 0 for prompts served from its cache)."""

    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None = None  # `prompt_tokens_details.cached_tokens`, where sent


@dataclass(frozen=True)
class StreamResult:
    """One finished model turn."""

    text: str
    tool_calls: list[ToolCall]
    finish_reason: str | None
    usage: Usage | None
    reasoning: str = ""
    served_model: str = ""  # the model the server's chunks name (ChatClient: "" if the one asked)

    def to_message(self) -> Message:
        message: Message = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [call.to_wire() for call in self.tool_calls]
        return message


@dataclass
class ToolResult:
    """What a tool gives back. `content` is what the model reads; `meta` feeds placeholders
    and the log (path, command, exit_code, ...)."""

    content: str
    ok: bool = True
    meta: dict[str, Any] = field(default_factory=dict)


class Tool(Protocol):
    name: str
    # The argument that says what a call is about (a path, a command): the placeholder of a
    # masked result and the dashboard's line for the call name it. "" for none.
    subject: str

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool definition: {"type": "function", "function": {...}}."""
        ...

    async def run(self, arguments: dict[str, Any]) -> ToolResult: ...


@dataclass(frozen=True)
class WireMessages:
    """A conversation as the server reads it, already encoded: each message's JSON (encoded
    once, when it entered the conversation), and every tool-call id it uses."""

    json: tuple[bytes, ...]
    call_ids: AbstractSet[str]


# Called with each piece of assistant text as it streams in.
TextSink = Callable[[str], None]
# (kind, message): a warning shown once per run and kind.
Warn = Callable[[str, str], None]
# (which kinds, message): the warnings of the kinds picked are over (warning_cleared events).
Clear = Callable[[Callable[[str], bool], str], None]


class ModelClient(Protocol):
    async def complete(
        self, messages: list[Message] | WireMessages, tools: list[dict[str, Any]],
        on_text: TextSink | None = None
    ) -> StreamResult: ...

    async def prompt_tokens(self, messages: list[Message] | WireMessages,
                            tools: list[dict[str, Any]]) -> int | None:
        """The server's own count of a prompt, where it can give one."""
        ...


class TokenCounter(Protocol):
    @property
    def available(self) -> bool | None:
        """Whether the server has a tokenizer endpoint (None: not asked yet)."""
        ...

    async def count(self, text: str) -> int | None:
        """Tokens in `text` by the server's own tokenizer; None when it cannot say."""
        ...


class EventSink(Protocol):
    def emit(self, event: EventBase) -> Any:
        """Write `event` as the next record (the sink fills in its envelope)."""
        ...


class RunLog(EventSink, Protocol):
    """The run's event log as a session writes it: events.EventLog, or a list in tests."""

    seq: int  # the number of the last event written
    session: int  # stamped on every event, with `turn`
    turn: int
    durability: Literal["turn", "event"]  # "event": every write is made durable at once
    redact: Callable[[str], str] | None  # known secrets replaced in what is written

    def commit(self) -> None:
        """A turn boundary: make what was logged durable."""
        ...

    def sync(self) -> None:
        """Make everything logged so far durable (before a snapshot names its seq)."""
        ...


Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
