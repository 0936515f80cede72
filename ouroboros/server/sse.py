"""Server-sent events: raw bytes in, the data of each event out. Pure: no I/O.

    decoder = SSEDecoder()
    for data in decoder.feed(raw_bytes):   # any split: mid-line, mid-character, mid-CRLF
        ...                                # '{"choices": ...}', '[DONE]'
    for data in decoder.close():           # at the end: an event without its blank line
        ...

Two steps, each usable alone: `LineSplitter` cuts bytes into lines, `EventDecoder` reads lines
as the WHATWG EventSource specification does ("interpreting an event stream"): the `data:`
lines of one event are joined with "\\n", a blank line ends the event, `:` lines are comments,
one space after the colon is dropped, other fields (`event:`, `id:`, `retry:`) are ignored.
One deviation: an event that the end of the stream cuts off before its blank line is still
given out, for servers that drop the last blank line.

Why not httpx's `Response.aiter_lines()`: it splits with `str.splitlines()`, so U+2028,
U+2029 and U+0085, which JSON allows unescaped inside strings and models do write, would cut a
`data:` line in two (httpx-sse#34); and it holds a line until the line ends, so a server that
sends one endless line would never meet `model.max_reply_bytes`. The client counts the raw
bytes, then splits them here on CR, LF and CRLF alone.
"""

from __future__ import annotations

from typing import Iterator


class LineSplitter:
    """Incremental line splitter fed raw bytes; lines end with `\\n`, `\\r\\n` or `\\r` only.

    Splitting happens on bytes, which is safe because no byte of a multi-byte UTF-8 character
    is CR or LF; each whole line is then decoded (invalid UTF-8 becomes U+FFFD).

        splitter = LineSplitter()
        splitter.feed(b"data: a\\r\\n\\r\\ndata: b")   # ["data: a", ""]
        splitter.close()                              # ["data: b"]
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._searched = 0  # the buffer's first bytes, known to hold no line ending

    def feed(self, data: bytes) -> list[str]:
        """The lines that `data` completes, without their line endings."""
        self._buffer += data
        return list(self._take_lines())

    def close(self) -> list[str]:
        """The last line, if the stream ended without a line ending after it."""
        rest = self._buffer.decode("utf-8", errors="replace")
        self._buffer.clear()
        self._searched = 0
        if rest.endswith("\r"):  # a line ending after all, not half of a CRLF
            return [rest[:-1]]
        return [rest] if rest else []

    def _take_lines(self) -> Iterator[str]:
        buffer = self._buffer
        start = 0
        while True:
            search = max(start, self._searched)  # a long line is searched once, not per feed
            lf = buffer.find(b"\n", search)
            cr = buffer.find(b"\r", search, lf if lf >= 0 else len(buffer))
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
        self._searched = len(buffer) - buffer.endswith(b"\r")


class EventDecoder:
    """Lines in (without their endings), the data of each finished event out.

    events = EventDecoder()
    [events.feed(line) for line in ["data: a", ": ping", "data:b", ""]]
    # [None, None, None, "a\\nb"]
    """

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed(self, line: str) -> str | None:
        """The data of the event this line ends (a blank line), else None."""
        if not line:
            return self._dispatch()
        name, _, value = line.partition(":")
        if name == "data":  # a comment (":...") has the name ""
            self._data.append(value[1:] if value[:1] == " " else value)
        return None

    def close(self) -> str | None:
        """The data of an event the stream's end cut off before its blank line."""
        return self._dispatch()

    def _dispatch(self) -> str | None:
        if not self._data:
            return None
        data = "\n".join(self._data)
        self._data = []
        return data


class SSEDecoder:
    """Raw bytes in, the data of each finished event out: `LineSplitter` then `EventDecoder`."""

    def __init__(self) -> None:
        self._lines = LineSplitter()
        self._events = EventDecoder()

    def feed(self, data: bytes) -> list[str]:
        """The data of the events that `data` completes."""
        found = []
        for line in self._lines.feed(data):
            event = self._events.feed(line)
            if event is not None:
                found.append(event)
        return found

    def close(self) -> list[str]:
        """The data of an event the stream's end left without its blank line (or its last
        line ending)."""
        found = [
            event for line in self._lines.close() if (event := self._events.feed(line)) is not None
        ]
        last = self._events.close()
        return found + ([last] if last is not None else [])
