"""Fakes for the session's seams (ouroboros/protocols.py): a model client that answers from a
script and records what it was sent, and an event sink that keeps the events in a list.

    model = FakeModel([reply("", call("file_read", path="notes.md")), reply("done")])
    log = MemoryLog()
    ...  # a Session built with them
    model.requests[0]          # the messages of the first request, as the server read them
    log.of_type("tool_result")
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal, Union

from ouroboros.protocols import (
    Message,
    StreamResult,
    TextSink,
    ToolCall,
    ToolResult,
    Usage,
    WireMessages,
)
from ouroboros.store.events import EventBase

_ids = itertools.count(1)


def call(name: str, **arguments: Any) -> ToolCall:
    """A tool call as a model would make it (a fresh id each)."""
    return ToolCall(f"call-{next(_ids)}", name, json.dumps(arguments))


def reply(
    text: str = "",
    *calls: ToolCall,
    prompt_tokens: int | None = None,
    completion_tokens: int | None = None,
) -> StreamResult:
    """A whole model turn; usage only where a count is given (a server that sends none)."""
    usage = (
        None
        if prompt_tokens is None and completion_tokens is None
        else Usage(prompt_tokens, completion_tokens)
    )
    return StreamResult(text, list(calls), "tool_calls" if calls else "stop", usage)


class Hang:
    """A script step: the model never answers (until the wait is cancelled)."""


# A step: a reply, an error to raise, a function of the request's messages giving either,
# or Hang().
Step = Union[StreamResult, BaseException, Hang, Callable[[list[Message]], Any]]


class FakeModel:
    """A ModelClient that takes its replies from `script`, one per request, and records each
    request. When the script runs out, `then` (a function of the request) answers."""

    def __init__(
        self,
        script: Iterable[Step] = (),
        then: Callable[[list[Message]], Step] | None = None,
        prompt_count: int | None = None,
    ) -> None:
        self.script: deque[Step] = deque(script)
        self.then = then
        self.prompt_count = prompt_count  # what `prompt_tokens` answers
        self.requests: list[list[Message]] = []
        self.tools: list[list[dict[str, Any]]] = []
        self.waiting = asyncio.Event()  # set while a Hang step waits

    async def complete(
        self,
        messages: list[Message] | WireMessages,
        tools: list[dict[str, Any]],
        on_text: TextSink | None = None,
    ) -> StreamResult:
        sent = decoded(messages)
        self.requests.append(sent)
        self.tools.append(tools)
        step = self.script.popleft() if self.script else self.next_step(sent)
        if callable(step) and not isinstance(step, (StreamResult, Hang)):
            step = step(sent)
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, Hang):
            self.waiting.set()
            await asyncio.Future()  # until cancelled
        assert isinstance(step, StreamResult), step
        if on_text is not None and step.text:
            on_text(step.text)
        return step

    def next_step(self, sent: list[Message]) -> Step:
        if self.then is None:
            raise AssertionError(f"the script ran out at request {len(self.requests)}")
        return self.then(sent)

    async def prompt_tokens(
        self, messages: list[Message] | WireMessages, tools: list[dict[str, Any]]
    ) -> int | None:
        return self.prompt_count


def decoded(messages: list[Message] | WireMessages) -> list[Message]:
    """The messages of a request as the server reads them."""
    if isinstance(messages, WireMessages):
        return [json.loads(raw) for raw in messages.json]
    return [dict(m) for m in messages]


@dataclass
class MemoryLog:
    """The run's event log in memory (protocols.RunLog): each event gets its envelope, as
    EventLog gives it, and is kept in `events`."""

    events: list[EventBase] = field(default_factory=list)
    seq: int = 0
    session: int = 1
    turn: int = 0
    durability: Literal["turn", "event"] = "turn"
    commits: int = 0
    redact: Callable[[str], str] | None = None
    listeners: list[Callable[[EventBase], None]] = field(default_factory=list)

    def emit(self, event: EventBase) -> EventBase:
        self.seq += 1
        event.seq, event.session, event.turn = self.seq, self.session, self.turn
        self.events.append(event)
        for listener in self.listeners:
            listener(event)
        return event

    def commit(self) -> None:
        self.commits += 1

    def sync(self) -> None:
        pass

    def of_type(self, type: str) -> list[Any]:
        return [event for event in self.events if event.type == type]

    @property
    def types(self) -> list[str]:
        return [event.type for event in self.events]


class Waits:
    """A tool that never finishes (until a stop signal kills it)."""

    name = "wait"
    subject = ""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    def schema(self) -> dict[str, Any]:
        return {"type": "function", "function": {"name": self.name, "parameters": {}}}

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        self.started.set()
        await asyncio.Future()
        raise AssertionError("unreachable")
