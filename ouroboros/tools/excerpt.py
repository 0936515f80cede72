"""What file_read shows of a file: a range of its lines, capped in bytes, read in chunks.

`LineScanner` is fed a file's bytes chunk by chunk and keeps only what is shown (at most
`max_bytes` of it, plus one chunk in flight), so a 1 GB file of one line costs no more memory
than a short one; the rest is only counted. Pure: the reading loop is in files.py.

    scanner = LineScanner(offset=1, limit=None, max_bytes=50_000)
    for chunk in chunks:
        scanner.feed(chunk)
    shown = scanner.finish(counted=True)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

NEWLINE = 0x0A


@dataclass(frozen=True)
class Excerpt:
    """What file_read shows: lines `first`..`last` (1-based, inclusive) of `total`."""

    text: str
    first: int
    last: int
    total: int  # lines in the file, or the lines seen when not `counted` (a lower bound)
    size: int  # bytes shown
    capped: bool  # stopped early at the byte cap
    line_cut: bool  # the single line shown is longer than the cap and was cut
    counted: bool = True  # every line was counted (False: the scan stopped early)


class LineScanner:
    """Keeps lines `offset`.. (at most `limit` of them, at most `max_bytes` bytes) of the
    bytes fed to it, counting every line. A first line longer than `max_bytes` is cut rather
    than skipped."""

    def __init__(self, offset: int, limit: int | None, max_bytes: int) -> None:
        self.offset = offset
        self.end = None if limit is None else offset + limit - 1
        self.max_bytes = max_bytes
        self.lines = 0  # newlines seen
        self.tail = False  # bytes seen after the last newline
        self.shown = bytearray()
        self.shown_lines = 0
        self.line = bytearray()  # the start of the line being read, if it may be shown
        self.line_size = 0  # that line's whole size so far
        self.capped = self.line_cut = False
        self.done = False  # nothing more will be shown: only counting

    def feed(self, chunk: bytes) -> None:
        position = 0
        while position < len(chunk) and not self.done:
            number = self.lines + 1
            if number < self.offset:
                position = self._skip(chunk, position, self.offset - number)
            elif self.end is not None and number > self.end:
                self.done = True
            else:
                position = self._take(chunk, position)
        if position < len(chunk):
            self.lines += chunk.count(b"\n", position)
        if chunk:
            self.tail = chunk[-1] != NEWLINE

    def finish(self, *, counted: bool = True) -> Excerpt:
        """The excerpt; `counted` says whether the whole file was fed."""
        if self.line_size and not self.done:  # a last line with no newline
            self._shown_line()
        total = self.lines + (1 if self.tail else 0)
        text = bytes(self.shown).decode("utf-8", errors="replace")
        return Excerpt(
            text,
            self.offset,
            self.offset + self.shown_lines - 1,
            total,
            len(self.shown),
            self.capped,
            self.line_cut,
            counted,
        )

    def _skip(self, chunk: bytes, position: int, lines: int) -> int:
        """Past `lines` newlines, or to the chunk's end if it holds fewer."""
        if chunk.count(b"\n", position) < lines:
            self.lines += chunk.count(b"\n", position)
            return len(chunk)
        for _ in range(lines):
            position = chunk.index(b"\n", position) + 1
        self.lines += lines
        return position

    def _take(self, chunk: bytes, position: int) -> int:
        """Read the shown line on to its newline or the chunk's end."""
        newline = chunk.find(b"\n", position)
        stop = len(chunk) if newline < 0 else newline + 1
        room = self.max_bytes - len(self.shown)
        keep = max(0, min(stop - position, room + 1 - len(self.line)))  # one over: too long
        self.line += chunk[position : position + keep]
        self.line_size += stop - position
        if self.line_size > room:
            self._overflow()
        elif newline >= 0:
            self._shown_line()
        if newline >= 0:
            self.lines += 1
        return stop

    def _shown_line(self) -> None:
        self.shown += self.line
        self.shown_lines += 1
        self.line, self.line_size = bytearray(), 0
        if self.end is not None and self.offset + self.shown_lines - 1 >= self.end:
            self.done = True

    def _overflow(self) -> None:
        """The line does not fit: cut it if nothing is shown yet, and stop showing."""
        if not self.shown_lines:
            self.shown += self.line[: self.max_bytes]
            self.shown_lines, self.line_cut = 1, True
        self.capped = self.done = True
        self.line, self.line_size = bytearray(), 0


def excerpt(chunks: Iterable[bytes], offset: int, limit: int | None, max_bytes: int) -> Excerpt:
    """Pick lines `offset`.. (at most `limit` of them, at most `max_bytes` bytes) from the
    bytes in `chunks`, counting them all."""
    scanner = LineScanner(offset, limit, max_bytes)
    for chunk in chunks:
        scanner.feed(chunk)
    return scanner.finish()


def excerpt_note(shown: Excerpt, max_bytes: int) -> str | None:
    """The trailing note telling the model what part of the file it got and how to get more."""
    total = str(shown.total) if shown.counted else f"at least {shown.total}"
    at_end = shown.counted and shown.last == shown.total
    if shown.line_cut:
        rest = "" if at_end else f"; call file_read with offset={shown.last + 1} for the next line"
        return (
            f"[line {shown.first} is longer than {max_bytes} bytes and only its start is shown; "
            f"use shell_exec (e.g. cut -c or fold) to see the rest of it{rest}]"
        )
    if shown.first == 1 and at_end:
        return None
    span = f"[lines {shown.first}-{shown.last} of {total} shown"
    if at_end:
        return span + "]"
    more = f"call file_read with offset={shown.last + 1} to read more"
    if shown.capped:
        return f"{span}; output capped at {max_bytes} bytes; {more}]"
    return f"{span}; {more}]"
