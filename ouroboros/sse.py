"""Server-sent events in, one finished model turn out. Pure: no I/O.

    decoder = SSEDecoder()
    accumulator = StreamAccumulator()
    for payload in decoder.feed(raw_bytes):        # any split: mid-line, mid-character, mid-CRLF
        chunk = parse_data(payload)                 # None for [DONE]
        if chunk is not None:
            accumulator.feed(chunk)
    result = accumulator.result()
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from ouroboros.protocols import StreamResult, ToolCall, Usage

DONE = "[DONE]"


def data_payload(line: str) -> str | None:
    """The payload of one SSE line if it is a non-empty `data:` field, else None.

    `data:{...}` and `data: {...}` both count; comments (`: ping`), `event:`, `id:`,
    `retry:` and blank lines do not.
    """
    if not line.startswith("data:"):
        return None
    payload = line[5:]
    if payload.startswith(" "):
        payload = payload[1:]
    return payload if payload.strip() else None


def iter_sse_data(lines: Iterable[str]) -> Iterator[str]:
    """The `data:` payloads of already-split lines (line endings, if present, are dropped)."""
    for line in lines:
        payload = data_payload(line.rstrip("\r\n"))
        if payload is not None:
            yield payload


class SSEDecoder:
    """Incremental decoder fed raw bytes; returns the `data:` payloads completed so far.

    Lines end with `\\n`, `\\r\\n` or `\\r`. Splitting happens on bytes, which is safe because
    no byte of a multi-byte UTF-8 character is CR or LF; each whole line is then decoded.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[str]:
        self._buffer += data
        payloads = []
        for line in self._take_lines():
            payload = data_payload(line)
            if payload is not None:
                payloads.append(payload)
        return payloads

    def close(self) -> list[str]:
        """The payload of a last line that had no line ending (the stream is over)."""
        rest = self._buffer.decode("utf-8", errors="replace")
        self._buffer.clear()
        payload = data_payload(rest.rstrip("\r"))
        return [payload] if payload is not None else []

    def _take_lines(self) -> Iterator[str]:
        buffer = self._buffer
        start = 0
        while True:
            lf = buffer.find(b"\n", start)
            cr = buffer.find(b"\r", start, lf if lf >= 0 else len(buffer))
            if cr >= 0:
                if cr + 1 == len(buffer):
                    break  # a CR at the very end may be the first half of CRLF: wait
                end, next_start = cr, cr + 2 if buffer[cr + 1] == 0x0A else cr + 1
            elif lf >= 0:
                end, next_start = lf, lf + 1
            else:
                break
            yield buffer[start:end].decode("utf-8", errors="replace")
            start = next_start
        del buffer[:start]


def parse_data(payload: str) -> dict[str, Any] | None:
    """One `data:` payload as a chunk dict; None for `[DONE]`; ValueError if it is not a
    JSON object."""
    text = payload.strip()
    if text == DONE:
        return None
    chunk = json.loads(text)  # json.JSONDecodeError is a ValueError
    if not isinstance(chunk, dict):
        raise ValueError(f"expected a JSON object, got {type(chunk).__name__}: {text[:80]}")
    return chunk


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamAccumulator:
    """Builds a StreamResult from the chunks of one streamed completion.

    Tool calls are merged by `index`: Ollama sends each call whole, OpenAI-style servers send
    id and name first and argument fragments after. A fragment whose id differs from the one
    already at its index starts a new call (servers that number every chunk from 0).
    """

    def __init__(self) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[_PartialCall] = []
        self._position_of_index: dict[Any, int] = {}
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.chunks = 0

    def feed(self, chunk: dict[str, Any]) -> str:
        """Take one chunk; return the assistant text it added ("" if none)."""
        self.chunks += 1
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = parse_usage(usage)
        added = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._text.append(content)
                added.append(content)
            reasoning = delta.get("reasoning") or delta.get("reasoning_content")
            if isinstance(reasoning, str):
                self._reasoning.append(reasoning)
            for fragment in delta.get("tool_calls") or []:
                self._add_call_fragment(fragment)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return "".join(added)

    def _add_call_fragment(self, fragment: dict[str, Any]) -> None:
        call_id = fragment.get("id") or ""
        index = fragment.get("index")
        if index is None:  # servers that omit the index: a new id is a new call
            known = [i for i, call in enumerate(self._calls) if call.id == call_id]
            if known:
                position = known[0]
            elif call_id or not self._calls:
                position = self._new_call(("no-index", len(self._calls)))
            else:
                position = len(self._calls) - 1
        elif index not in self._position_of_index:
            position = self._new_call(index)
        else:
            position = self._position_of_index[index]
            existing = self._calls[position].id
            if call_id and existing and call_id != existing:
                position = self._new_call(index)
        call = self._calls[position]
        call.id = call.id or call_id
        function = fragment.get("function") or {}
        call.name = call.name or function.get("name") or ""
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call.arguments.append(arguments)
        elif arguments is not None:  # an object instead of a JSON string
            call.arguments.append(json.dumps(arguments))

    def _new_call(self, index: Any) -> int:
        self._calls.append(_PartialCall())
        self._position_of_index[index] = len(self._calls) - 1
        return len(self._calls) - 1

    def result(self) -> StreamResult:
        """The turn so far. Calls without an id get `call_<n>`; older Ollama's `stop` after tool
        calls is reported as `tool_calls`."""
        calls = [
            ToolCall(id=call.id or f"call_{n}", name=call.name, arguments="".join(call.arguments))
            for n, call in enumerate(self._calls)
            if call.name or call.arguments
        ]
        finish_reason = self.finish_reason
        if calls and finish_reason == "stop":
            finish_reason = "tool_calls"
        return StreamResult(
            text="".join(self._text),
            tool_calls=calls,
            finish_reason=finish_reason,
            usage=self.usage,
            reasoning="".join(self._reasoning),
        )


def parse_usage(usage: dict[str, Any]) -> Usage:
    """A usage object as the server sent it; counts that are missing, null, 0, negative or
    not numbers become None."""
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(
        prompt_tokens=_count(usage.get("prompt_tokens")),
        completion_tokens=_count(usage.get("completion_tokens")),
        cached_tokens=_count(cached),
    )


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value) if value >= 1 else None
