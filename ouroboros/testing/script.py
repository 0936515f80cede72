"""What the scripted model says: its replies, the failures it fakes, and their order.

A script is a list (or a lazy iterator) of `Reply` and `Fault`, consumed one item per chat
request, or a `Brain`: a function from the messages the model would see to its reply.
Faults injected while the server runs come before the script.

    script = Script([Reply("Reading it.", [("file_read", {"path": "a.txt"})]), Reply("Done.")])
    script.inject([Fault("status", 503)])
    script.next_fault()                  # Fault("status", 503)
    script.next_item(messages)           # Reply("Reading it.", ...)
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Literal

from ouroboros.protocols import Message

SCRIPT_FINISHED = "(script finished)"
"""The text of every reply once a list script is used up."""


@dataclass
class Reply:
    """One model turn."""

    text: str = ""
    tool_calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)
    """(name, arguments); a str is sent verbatim, which lets tests send broken JSON."""
    reasoning: str = ""
    """Sent as `delta.reasoning` before the text, as thinking models do."""
    finish_reason: str | None = None
    """The finish reason sent; None: `tool_calls` for a reply with calls, else `stop`
    ("length" with a str of arguments cut short: a call cut at max_tokens)."""


@dataclass
class Fault:
    """An injected failure for one request."""

    kind: Literal["status", "drop", "garbage", "no_done", "empty", "outage", "slow"]
    status: int = 500
    message: str = "internal error"
    seconds: float = 0.0
    """outage: refuse connections this long; slow: delay before the first byte."""


Brain = Callable[[list[Message]], Reply]


class Script:
    """The queue of what the scripted model says next: injected faults, then the script.

    Not thread-safe: the server calls it with its lock held.
    """

    def __init__(self, script: Brain | Iterable[Reply | Fault]) -> None:
        self._brain: Brain | None = script if callable(script) else None
        self._items: Iterator[Reply | Fault] = iter(() if callable(script) else script)
        self._head: deque[Reply | Fault] = deque()  # the item peeked at, not yet consumed
        self._faults: deque[Fault] = deque()

    def inject(self, faults: Iterable[Fault]) -> None:
        """Queue these faults, in order, after those already injected and before the script."""
        self._faults.extend(faults)

    def put_back(self, fault: Fault) -> None:
        """Make `fault` the very next thing again (an outage a request cannot carry out)."""
        self._faults.appendleft(fault)

    def next_fault(self) -> Fault | None:
        """The injected fault for this request, or the script's when it is a Fault."""
        if self._faults:
            return self._faults.popleft()
        head = self._peek()
        if isinstance(head, Fault):
            self._head.popleft()
            return head
        return None

    def next_item(self, messages: list[Message]) -> Reply | Fault:
        """The script's next item, what the brain answers to `messages`, or, once a list
        script is used up, a reply saying so."""
        if self._brain is not None:
            return self._brain(messages)
        if self._peek() is None:
            return Reply(SCRIPT_FINISHED)
        return self._head.popleft()

    def outage_due(self) -> Fault | None:
        """The outage at the front of the queue, if that is what comes next."""
        head = self._faults[0] if self._faults else self._peek()
        return head if isinstance(head, Fault) and head.kind == "outage" else None

    def take_outage(self) -> None:
        """Consume the outage `outage_due` returned: the server is starting it."""
        if self._faults:
            self._faults.popleft()
        else:
            self._head.popleft()

    def _peek(self) -> Reply | Fault | None:
        if not self._head:
            item = next(self._items, None)
            if item is not None:
                self._head.append(item)
        return self._head[0] if self._head else None
