"""The seams: the data that crosses module boundaries and the interfaces everything depends on.

Messages are plain dicts in the OpenAI chat format, exactly as they go over the wire and into
the log, so nothing needs converting between the conversation, the request and a snapshot.

How whoever runs the harness takes part (a terminal, a test, the demo) is here too: the run's
hooks (`RunHooks`: the events and text it is shown, a restart it is asked to confirm) and the
stop flag it may raise (`StopFlag`), so a view can be handed to a run without importing it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import (
    TYPE_CHECKING,
    AbstractSet,
    Any,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Literal,
    Protocol,
    TypeVar,
)

if TYPE_CHECKING:
    import asyncio

    from ouroboros.store.events import EventBase

Message = dict[str, Any]
JsonObject = dict[str, Any]  # a JSON object as read from a file or the log, or to be written


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


# What masking leaves of a call's arguments (window/conversation.py's cut_arguments): the
# content of a file_write that a later write of the file replaced, and the head of any other
# long argument. A model that copies the shape of an earlier call would write these into a
# file or run them, so file_write and shell_exec refuse text that holds one (holds_stand_in).
REPLACED_CONTENT = "[{chars:,} characters, replaced since by a later write of {path}]"
ARGUMENT_CUT = "[... {chars:,} more characters, not kept in the history]"
_STAND_IN = re.compile(
    r"\[[\d,]+ characters, replaced since by a later write of [^\]\n]*\]"
    r"|\[\.\.\. [\d,]+ more characters, not kept in the history\]"
)


def replaced_content(chars: int, path: str) -> str:
    """The content of a write a later write of `path` replaced, as the history keeps it."""
    return REPLACED_CONTENT.format(chars=chars, path=path)


def argument_cut(chars: int) -> str:
    """What follows the head of a long argument the history keeps, for the `chars` it cut."""
    return ARGUMENT_CUT.format(chars=chars)


def holds_stand_in(text: str) -> bool:
    """Whether `text` holds what masking left in place of a call's argument."""
    return _STAND_IN.search(text) is not None


@dataclass(frozen=True)
class Usage:
    """What the server said the request cost. A count that is absent, null or 0 is None:
    unknown, not zero (Ollama reports 0 for prompts served from its cache); of the two parts
    of the prompt, 0 is a count and None means not reported."""

    prompt_tokens: int | None
    completion_tokens: int | None
    # The prompt's tokens taken from the server's prefix cache: OpenAI-style
    # `prompt_tokens_details.cached_tokens` (vLLM, hosted APIs), or llama.cpp's `timings.cache_n`
    cached_tokens: int | None = None
    processed_tokens: int | None = None  # evaluated for this request: llama.cpp's `prompt_n`


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
        self,
        messages: list[Message] | WireMessages,
        tools: list[dict[str, Any]],
        on_text: TextSink | None = None,
    ) -> StreamResult: ...

    async def prompt_tokens(
        self, messages: list[Message] | WireMessages, tools: list[dict[str, Any]]
    ) -> int | None:
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
    """The run's event log as a session writes it: store.log.EventLog, or a list in tests."""

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

# Called with each event as the log writes it.
Listener = Callable[["EventBase"], None]
# Asked with the reason before a session restarts (context.auto_restart = false); True: go ahead.
ConfirmRestart = Callable[[str], bool]

T = TypeVar("T")


class Interrupted(Exception):
    """The work was cancelled by a stop signal; `reason` is what the run ends with."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class StopFlag:
    """Set by a stop signal (or by whoever runs the harness, with `request`); how the run
    reacts is in loop/stopping.py.

    `request` stops the run before its next turn; `signal` also ends the current wait."""

    reason: str | None = None
    signals: int = 0
    signal_name: str | None = None  # the first signal's: "SIGINT", "SIGTERM", "SIGPIPE"
    # Called with the signal's name on the first signal (the runner logs `stop_requested`).
    listeners: list[Callable[[str], None]] = field(default_factory=list)
    _waiting: asyncio.Future[Any] | None = field(default=None, repr=False)

    def request(self, reason: str) -> None:
        self.reason = self.reason or reason

    def signal(self, name: str) -> None:
        """A SIGINT or SIGTERM: the first ends the current wait, the second its clean-up."""
        self.signals += 1
        if self.signals == 1:
            self.reason = self.reason or "interrupted"
            self.signal_name = name
            for listener in self.listeners:
                listener(name)
        else:
            self.reason = "interrupted_now"
        if self._waiting is not None:
            self._waiting.cancel()

    async def cancellable(self, work: Coroutine[Any, Any, T]) -> T:
        """Await `work` as a task of its own that a stop signal cancels. Raises Interrupted
        when a signal cancelled it (at once if one came before it started); any other
        outcome, exceptions included, is passed on."""
        import asyncio  # here: a view that only hands a run its hooks loads no event loop

        task = asyncio.ensure_future(work)
        self._waiting = task
        if self.signals:
            task.cancel()
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:  # cancelled from outside: take the work down too
            task.cancel()
            raise
        finally:
            self._waiting = None
        if task.cancelled():
            if self.signals:
                raise Interrupted(self.reason or "interrupted")
            raise asyncio.CancelledError()
        return task.result()


@dataclass
class RunHooks:
    """How the terminal takes part: it watches events and text, and may be asked to confirm."""

    on_event: Listener | None = None
    on_text: TextSink | None = None
    confirm_restart: ConfirmRestart | None = None  # None: cannot ask (headless)
    stop: StopFlag = field(default_factory=StopFlag)
