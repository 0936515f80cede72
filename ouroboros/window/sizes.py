"""Running sums over the conversation, so a turn costs what changed, not what is held.

Each message is sized and encoded once, when the tally first sees it: its characters, its
measured tokens (`_tokens`, see tokens.py) and its wire form as JSON bytes. Totals are running
sums. The tally catches up with the message list it is given: messages appended since the last
look are added, a list cut short (or parting from the one held a few messages from its end)
drops its tail, and anything else (a new revision of the conversation: masking, dropped
turns, a new session) is rebuilt from the entries already made, so only the messages that
really changed are sized and encoded again. A message object
appears once in a conversation; tool-call ids of messages cut off stay in `call_ids`.

    tally.sync(messages, revision, worth_masking)
    tokens = base + tally.tokens(chars_per_token)
    wire = tally.wire()  # (b'{"role":"system",...}', ...)
"""

from __future__ import annotations

import json
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any, Callable

from ouroboros.window import ledger as tk
from ouroboros.protocols import Message, WireMessages
from ouroboros.protocols import call_ids_in

# How far back from the end a list may part from the one held and still be caught up with
# (a replay that takes back a reply); further, everything is looked at again.
LOOK_BACK = 8
# The tool-call id of a result worth masking, else None; asked once per message.
WorthMasking = Callable[[Message], "str | None"]


def encode_json(value: Any) -> bytes:
    """Compact UTF-8 JSON, byte for byte as httpx encodes a `json=` body."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def encode(message: Message) -> bytes:
    """The message as the server reads it: JSON, without the harness's private keys."""
    return encode_json({k: v for k, v in message.items() if not k.startswith("_")})


def wire_messages(messages: list[Message]) -> WireMessages:
    """A list of messages encoded in one go (the tally's `wire` does it message by message)."""
    return WireMessages(tuple(map(encode, messages)), call_ids_in(messages))


@dataclass(slots=True)
class Entry:
    message: Message  # held, so the message is the same object while the entry lives
    chars: int
    dense: int  # of those, characters of a densely tokenized script
    wire: bytes
    candidate: str | None  # its tool-call id, if it is a result worth masking
    index: int = 0  # its place in the conversation held


def make_entry(message: Message, worth_masking: WorthMasking) -> Entry:
    return Entry(message, tk.message_chars(message), tk.message_dense(message), encode(message),
                 worth_masking(message))


class Tally:
    """What the conversation adds up to, kept current by appends rather than by walks."""

    def __init__(self) -> None:
        self._made: dict[int, Entry] = {}  # id(message) -> its entry, reused on a rebuild
        self._clear(None)

    def _clear(self, revision: int | None) -> None:
        self._revision = revision
        self._entries: list[Entry] = []
        self._wires: list[bytes] = []
        self._measured_sum = 0
        self._unmeasured: dict[int, Entry] = {}  # id(message) -> entry, of the never counted
        self._cpt = 0.0  # the chars per token the estimates below were made at (0: none)
        self._per_dense = tk.DEFAULT_TOKENS_PER_DENSE_CHAR  # and the tokens per dense char
        self._estimated = 0
        self._candidates: list[str] = []
        self._candidate_at: list[int] = []
        self._starts: list[int] = []  # indexes of the assistant messages
        self._call_ids: set[str] = set()

    # -- keeping up --

    def sync(self, messages: list[Message], revision: int, worth_masking: WorthMasking) -> None:
        """Catch up with `messages` (revision: the conversation's, see ContextManager)."""
        shared = self._shared(messages) if revision == self._revision else None
        if shared is not None:
            if shared < len(self._entries):
                self._cut(shared)
            for message in messages[shared:]:
                self._add(message, worth_masking)
            return
        made, self._made = self._made, {}
        self._clear(revision)
        for message in messages:
            entry = made.get(id(message))
            if entry is None or entry.message is not message:
                entry = None
            elif entry.candidate is not None:  # its observation may have been masked since
                entry.candidate = worth_masking(message)
            self._add(message, worth_masking, entry)

    def _shared(self, messages: list[Message]) -> int | None:
        """How many leading messages are the ones held, if the two part near the end; None
        if not (the revision says nothing else changed, so the ends are all that is looked
        at)."""
        entries = self._entries
        shared = min(len(entries), len(messages))
        if shared and messages[0] is not entries[0].message:
            return None
        for _ in range(LOOK_BACK):
            if shared == 0 or messages[shared - 1] is entries[shared - 1].message:
                return shared
            shared -= 1
        return None

    def _add(self, message: Message, worth_masking: WorthMasking,
             entry: Entry | None = None) -> None:
        entry = entry or make_entry(message, worth_masking)
        entry.index = index = len(self._entries)
        self._entries.append(entry)
        self._wires.append(entry.wire)
        self._count_in(entry)
        if entry.candidate is not None:
            self._candidates.append(entry.candidate)
            self._candidate_at.append(index)
        if message["role"] == "assistant":
            self._starts.append(index)
        self._call_ids.update(call_ids_in((message,)))

    def _count_in(self, entry: Entry) -> None:
        message = entry.message
        self._made[id(message)] = entry
        measured = tk.measured(message)
        if measured is None:
            self._unmeasured[id(message)] = entry
            self._estimated += self._estimate(entry)
        else:
            self._measured_sum += measured

    def _count_out(self, entry: Entry) -> None:
        message = entry.message
        if self._unmeasured.pop(id(message), None) is None:
            self._measured_sum -= tk.measured(message) or 0
        else:
            self._estimated -= self._estimate(entry)

    def _cut(self, start: int) -> None:
        """Forget the messages from `start` on (the list was cut short)."""
        for entry in self._entries[start:]:
            self._count_out(entry)
        del self._entries[start:], self._wires[start:]
        cut = bisect_left(self._candidate_at, start)
        del self._candidates[cut:], self._candidate_at[cut:]
        del self._starts[bisect_left(self._starts, start):]

    def replace(self, messages: list[Message], tool_call_ids: list[str], revision: int,
                worth_masking: WorthMasking) -> None:
        """`messages` is the list held with the results of these calls replaced one for one,
        as masking does, at a new revision: only those are sized and encoded again. (Should
        anything else differ, the next sync rebuilds.)"""
        if len(messages) != len(self._entries):
            return
        for call_id in tool_call_ids:
            if call_id not in self._candidates:
                return
            at = self._candidates.index(call_id)
            index = self._candidate_at[at]
            del self._candidates[at], self._candidate_at[at]
            self._count_out(self._entries[index])
            self._made.pop(id(self._entries[index].message), None)
            entry = make_entry(messages[index], worth_masking)
            if entry.candidate is not None:  # the new content is still worth masking
                return
            entry.index = index
            self._entries[index], self._wires[index] = entry, entry.wire
            self._count_in(entry)
        self._revision = revision

    def measure(self, message: Message, tokens: int) -> None:
        """Write the measured size of a message held and not measured yet."""
        entry = self._unmeasured.pop(id(message))
        self._estimated -= self._estimate(entry)
        message[tk.TOKENS_KEY] = tokens
        self._measured_sum += tokens

    def _estimate(self, entry: Entry) -> int:
        if not self._cpt:
            return 0
        return (tk.estimate_chars(entry.chars, self._cpt, entry.dense, self._per_dense)
                + tk.MESSAGE_OVERHEAD_TOKENS)

    # -- what it adds up to --

    def tokens(self, chars_per_token: float,
               per_dense: float = tk.DEFAULT_TOKENS_PER_DENSE_CHAR) -> int:
        """The messages' measured tokens, and estimates for the rest."""
        if chars_per_token != self._cpt or per_dense != self._per_dense:
            self._cpt, self._per_dense = chars_per_token, per_dense
            self._estimated = sum(self._estimate(e) for e in self._unmeasured.values())
        return self._measured_sum + self._estimated

    @property
    def measured_sum(self) -> int:
        return self._measured_sum

    def unmeasured(self) -> list[Message]:
        """The messages never counted, oldest first."""
        return [e.message for e in sorted(self._unmeasured.values(), key=lambda e: e.index)]

    def candidates(self, start: int = 0, stop: int | None = None) -> list[str]:
        """Tool-call ids of the results worth masking among messages[start:stop], oldest
        first."""
        at = self._candidate_at
        low = bisect_left(at, start)
        high = len(at) if stop is None else bisect_left(at, stop)
        return self._candidates[low:high]

    def size_of(self, tool_call_id: str) -> int:
        """The tokens a result worth masking takes now (measured, else estimated)."""
        at = len(self._candidates) - 1  # asked of the newest ones: look from the end
        while self._candidates[at] != tool_call_id:
            at -= 1
        entry = self._entries[self._candidate_at[at]]
        measured = tk.measured(entry.message)
        return measured if measured is not None else self._estimate(entry)

    @property
    def starts(self) -> list[int]:
        return self._starts

    def wire(self) -> WireMessages:
        return WireMessages(tuple(self._wires), frozenset(self._call_ids))
