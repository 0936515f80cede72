"""Running sums over the conversation, so a turn costs what changed, not what is held.

Each message is sized and encoded once, when the tally is told of it: its characters and its
wire form as JSON bytes (a message is its wire form, nothing else). Its entry also holds what
the harness keeps beside the message, never in it: its measured tokens (see ledger.py) and,
for a note of the harness's, its kind (conversation.NoteKind). Totals are running sums. The
tally does not look at the conversation: its owner (conversation.Conversation) tells it what
changed, by position: a message added at the end, the messages from a position on cut
off, one message replaced (masking), or the whole rebuilt from the entries it keeps (dropped
turns), so only the messages that really changed are sized and encoded again. Tool-call ids
of messages cut off stay in `call_ids`.

    tally.add(make_entry(message, worth_masking))
    tokens = base + tally.tokens(chars_per_token)
    wire = tally.wire()  # (b'{"role":"system",...}', ...)
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from collections.abc import Container
from dataclasses import dataclass
from typing import Any, Callable

from ouroboros.protocols import Message, WireMessages, call_ids_in
from ouroboros.window import ledger

# The tool-call id of a result worth masking, else None; asked once per message.
WorthMasking = Callable[[Message], "str | None"]


def encode_json(value: Any) -> bytes:
    """Compact UTF-8 JSON, byte for byte as httpx encodes a `json=` body."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def encode(message: Message) -> bytes:
    """The message as the server reads it: JSON. A message is its wire form as it is: what
    the harness keeps of it is beside it (its Entry; the system prompt's marks,
    loop/memory.py)."""
    return encode_json(message)


def wire_messages(messages: list[Message]) -> WireMessages:
    """A list of messages encoded in one go (the tally's `wire` does it message by message)."""
    return WireMessages(tuple(map(encode, messages)), call_ids_in(messages))


@dataclass(slots=True)
class Entry:
    """One message, its sizes, and what the harness keeps beside it."""

    message: Message
    chars: int
    dense: int  # of those, characters of a densely tokenized script
    wire: bytes
    candidate: str | None  # its tool-call id, if it is a result worth masking
    index: int = 0  # its position in the conversation
    tokens: int | None = None  # its measured size; None: never counted
    note: str | None = None  # the kind of note, for one the harness wrote (NoteKind)


def make_entry(
    message: Message,
    worth_masking: WorthMasking,
    tokens: int | None = None,
    note: str | None = None,
) -> Entry:
    return Entry(
        message,
        ledger.message_chars(message),
        ledger.message_dense(message),
        encode(message),
        worth_masking(message),
        tokens=tokens,
        note=note,
    )


class Tally:
    """What the conversation adds up to, kept current by its owner's changes, not by walks."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self._entries: list[Entry] = []
        self._wires: list[bytes] = []
        self._measured_sum = 0
        self._unmeasured: dict[int, Entry] = {}  # position -> entry, of the never counted
        self._cpt = 0.0  # the chars per token the estimates below were made at (0: none)
        self._per_dense = ledger.DEFAULT_TOKENS_PER_DENSE_CHAR  # and the tokens per dense char
        self._estimated = 0
        self._candidate_at: list[int] = []  # positions of the results worth masking
        self._starts: list[int] = []  # positions of the assistant messages
        # Every tool-call id used (as keys: `wire` hands out a read-only view, not a copy)
        self._call_ids: dict[str, None] = {}

    # -- told what changed --

    def add(self, entry: Entry) -> None:
        """A message added at the end, in its entry (make_entry; or the one it had, kept
        through a rebuild)."""
        message = entry.message
        entry.index = index = len(self._entries)
        self._entries.append(entry)
        self._wires.append(entry.wire)
        self._count_in(entry)
        if entry.candidate is not None:
            self._candidate_at.append(index)
        if message["role"] == "assistant":
            self._starts.append(index)
        self._call_ids.update(dict.fromkeys(call_ids_in((message,))))

    def cut(self, start: int) -> None:
        """Forget the messages from position `start` on."""
        for entry in self._entries[start:]:
            self._count_out(entry)
        del self._entries[start:], self._wires[start:]
        del self._candidate_at[bisect_left(self._candidate_at, start) :]
        del self._starts[bisect_left(self._starts, start) :]

    def rebuild(self, kept: list[Entry], worth_masking: WorthMasking) -> None:
        """Begin again from these entries, in order (the messages they hold stay as they
        are: nothing is sized or encoded again; whether each is worth masking is asked
        again, as its observation may have been masked since). The call ids of the messages
        left out stay taken, as after a cut."""
        taken = self._call_ids
        self.clear()
        self._call_ids = taken
        for entry in kept:
            if entry.candidate is not None:
                entry.candidate = worth_masking(entry.message)
            self.add(entry)

    def replace(self, index: int, message: Message, worth_masking: WorthMasking) -> None:
        """The message at `index` is replaced by `message` (a placeholder for a result, the
        system prompt as it is now): only it is sized and encoded again, and its measured
        size is unknown again."""
        old = self._entries[index]
        self._count_out(old)
        if old.candidate is not None:
            del self._candidate_at[bisect_left(self._candidate_at, index)]
        entry = make_entry(message, worth_masking)
        entry.index = index
        self._entries[index], self._wires[index] = entry, entry.wire
        self._count_in(entry)
        if entry.candidate is not None:
            self._candidate_at.insert(bisect_left(self._candidate_at, index), index)
        self._call_ids.update(dict.fromkeys(call_ids_in((message,))))

    def settle(self, index: int) -> None:
        """The result at `index` is no longer worth masking, though it stays as it is (a
        write whose call lost its content)."""
        entry = self._entries[index]
        if entry.candidate is not None:
            entry.candidate = None
            del self._candidate_at[bisect_left(self._candidate_at, index)]

    def measure(self, index: int, tokens: int) -> None:
        """Write the measured size of the message at `index` (a size measured before is
        replaced: a server's count of the prompt is truer than its tokenizer's of the text)."""
        entry = self._unmeasured.pop(index, None)
        if entry is None:
            entry = self._entries[index]
            self._measured_sum -= entry.tokens or 0
        else:
            self._estimated -= self._estimate(entry)
        entry.tokens = tokens
        self._measured_sum += tokens

    def _count_in(self, entry: Entry) -> None:
        if entry.tokens is None:
            self._unmeasured[entry.index] = entry
            self._estimated += self._estimate(entry)
        else:
            self._measured_sum += entry.tokens

    def _count_out(self, entry: Entry) -> None:
        if self._unmeasured.pop(entry.index, None) is None:
            self._measured_sum -= entry.tokens or 0
        else:
            self._estimated -= self._estimate(entry)

    def _estimate(self, entry: Entry) -> int:
        if not self._cpt:
            return 0
        return (
            ledger.estimate_chars(entry.chars, self._cpt, entry.dense, self._per_dense)
            + ledger.MESSAGE_OVERHEAD_TOKENS
        )

    # -- what it adds up to --

    def tokens(
        self,
        chars_per_token: float,
        per_dense: float = ledger.DEFAULT_TOKENS_PER_DENSE_CHAR,
        upto: int | None = None,
    ) -> int:
        """The messages' measured tokens, and estimates for the rest (of the first `upto`
        messages: the ones at the end are taken off, so asking costs what they are)."""
        if chars_per_token != self._cpt or per_dense != self._per_dense:
            self._cpt, self._per_dense = chars_per_token, per_dense
            self._estimated = sum(self._estimate(e) for e in self._unmeasured.values())
        tokens = self._measured_sum + self._estimated
        for entry in self._entries[len(self._entries) if upto is None else upto :]:
            tokens -= entry.tokens if entry.tokens is not None else self._estimate(entry)
        return tokens

    def measured_sum(self, upto: int | None = None) -> int:
        """The measured tokens of the first `upto` messages (all by default)."""
        tail = self._entries[len(self._entries) if upto is None else upto :]
        return self._measured_sum - sum(e.tokens or 0 for e in tail)

    def unmeasured(self, upto: int | None = None) -> list[int]:
        """The positions of the messages never counted, oldest first (among the first
        `upto`)."""
        return sorted(i for i in self._unmeasured if upto is None or i < upto)

    def candidates(self, start: int = 0, stop: int | None = None) -> list[str]:
        """Tool-call ids of the results worth masking among messages[start:stop], oldest
        first."""
        at = self._candidate_at
        low = bisect_left(at, start)
        high = len(at) if stop is None else bisect_left(at, stop)
        return [e.candidate for e in map(self._entries.__getitem__, at[low:high]) if e.candidate]

    def positions(self, tool_call_ids: Container[str]) -> list[int]:
        """The positions of the results worth masking whose tool-call ids are among these."""
        return [i for i in self._candidate_at if self._entries[i].candidate in tool_call_ids]

    def candidate_sizes(self, start: int = 0) -> dict[str, int]:
        """The tokens (measured, else estimated) each result worth masking among
        messages[start:] takes now, by tool-call id, oldest first."""
        at = self._candidate_at
        return {
            e.candidate: self._size(e)
            for e in map(self._entries.__getitem__, at[bisect_left(at, start) :])
            if e.candidate
        }

    def suffix(
        self,
        tool_call_id: str,
        chars_per_token: float,
        per_dense: float = ledger.DEFAULT_TOKENS_PER_DENSE_CHAR,
        call: bool = False,
    ) -> int:
        """The tokens from the result worth masking `tool_call_id` (`call`: from the call
        it answers, for masking that changes the call) to the end of the conversation:
        what a prefix-caching server processes again when that message is the first to
        change."""
        self.tokens(chars_per_token, per_dense)  # the estimates at these rates
        at = next(
            i for i in reversed(self._candidate_at) if self._entries[i].candidate == tool_call_id
        )
        if call:
            at = self.turn_of(at)
        return sum(map(self._size, self._entries[at:]))

    def turn_of(self, index: int) -> int:
        """The position of the assistant message whose turn holds the message at `index`."""
        return self._starts[bisect_right(self._starts, index) - 1]

    def _size(self, entry: Entry) -> int:
        return entry.tokens if entry.tokens is not None else self._estimate(entry)

    @property
    def starts(self) -> list[int]:
        return self._starts

    @property
    def entries(self) -> list[Entry]:
        return self._entries

    def wire(self, upto: int | None = None) -> WireMessages:
        """The messages (the first `upto`) encoded, and the call ids taken: a live view, so
        a request costs no copy of them (read it before the conversation changes)."""
        wires = self._wires if upto is None else self._wires[:upto]
        return WireMessages(tuple(wires), self._call_ids.keys())
