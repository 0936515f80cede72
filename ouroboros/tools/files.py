"""The file tools: file_read, file_write and list_dir, each confined to the workspace.

Every path is opened through tools/workspace.py, component by component from the workspace
root without following a link out, so no path can be swapped for a symlink between a check
and its use. Reads are bounded in memory (what is shown, plus one chunk) and in time (the
file's size when opened, at most READ_SECS, and at most COUNT_BYTES counted past what is
shown); a FIFO or device is refused, and so is a file with more than one hard link, which may
be a file outside the workspace. Writes go to a temporary file in the same directory fd and
are renamed over the target there.

Every result carries `meta` with the workspace-relative path and its size, for the
placeholders that later stand in for masked results. A path outside the workspace is refused
and reported to the `on_security` callback.
"""

from __future__ import annotations

import os
import posixpath
import stat
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

from pydantic import Field

from ouroboros.protocols import ToolResult, holds_stand_in
from ouroboros.store.atomic import replace_in
from ouroboros.tools.arguments import ModelTool, ToolArguments
from ouroboros.tools.excerpt import Excerpt, LineScanner, excerpt_note
from ouroboros.tools.safety import PathEscape, SecurityHook
from ouroboros.tools.workspace import (
    FINAL_DIR,
    FINAL_ENTRY,
    FINAL_FILE,
    Missing,
    NotADirectory,
    Workspace,
)

BINARY_SNIFF_BYTES = 8192
DEFAULT_MAX_ENTRIES = 500
CHUNK_BYTES = 65536  # read at a time: the memory a read needs beyond what it shows
READ_SECS = 2.0  # the longest a read scans a file
COUNT_BYTES = 64 << 20  # counted past what is shown, for "lines 1-40 of N"


class _Refusal(Exception):
    """A request the tool turns down with a message for the model."""


class _HardLink(Exception):
    """A file with more than one hard link: it may be a file outside the workspace."""


def count_lines(text: str) -> int:
    """Lines as file_read counts them: a final line without a newline still counts."""
    return text.count("\n") + (0 if text == "" or text.endswith("\n") else 1)


def scan(
    fd: int, size: int, scanner: LineScanner, clock: Callable[[], float] = time.monotonic
) -> bool:
    """Feed the first `size` bytes of `fd` to `scanner`, stopping after READ_SECS or once
    COUNT_BYTES are counted past what it shows. True if it read all `size` bytes. Raises
    _Refusal for a binary file (a NUL in its first BINARY_SNIFF_BYTES)."""
    deadline = clock() + READ_SECS
    done_at: int | None = None
    done = 0
    while done < size:
        if scanner.done and done_at is None:
            done_at = done
        if clock() > deadline or (done_at is not None and done - done_at >= COUNT_BYTES):
            return False
        chunk = os.read(fd, min(CHUNK_BYTES, size - done))
        if not chunk:
            break  # it shrank
        if done == 0 and b"\x00" in chunk[:BINARY_SNIFF_BYTES]:
            raise _Refusal("binary")
        done += len(chunk)
        scanner.feed(chunk)
    return True


def describe_entry(entry: os.DirEntry[str], directory: int) -> str:
    """One list_dir line: `name/` for a directory, `name (N bytes)` for a file, and the link
    target for a symlink. `entry` comes from scanning the directory fd `directory`."""
    try:
        if entry.is_symlink():
            slash = "/" if entry.is_dir() else ""
            return f"{entry.name}{slash} -> {os.readlink(entry.name, dir_fd=directory)}"
        if entry.is_dir():
            return f"{entry.name}/"
        return f"{entry.name} ({entry.stat().st_size} bytes)"
    except OSError:
        return f"{entry.name} (unreadable)"


def _error(message: str, path: str) -> ToolResult:
    return ToolResult(f"error: {message}", ok=False, meta={"path": path})


class PathArguments(ToolArguments):
    """What every file tool takes: a path in the workspace."""

    path: str = Field(description="File path, relative to the workspace.")


P = TypeVar("P", bound=PathArguments)


class _WorkspaceTool(ModelTool[P]):
    """Shared plumbing: turn escapes, refusals and OS errors into error results."""

    subject = "path"

    def __init__(self, workspace: Path, *, on_security: SecurityHook) -> None:
        self.workspace = workspace
        self.on_security = on_security
        self.files = Workspace(workspace)

    async def call(self, arguments: P) -> ToolResult:
        given = arguments.path
        try:
            return self._run(given, arguments)
        except PathEscape as escape:
            self.on_security({"kind": "path_escape", "tool": self.name, "path": given})
            return _error(str(escape), given)
        except _HardLink as refusal:
            self.on_security({"kind": "hard_link", "tool": self.name, "path": given})
            return _error(str(refusal), given)
        except (_Refusal, ValueError) as refusal:
            return _error(str(refusal), given)
        except OSError as failure:
            return _error(f"{self.name} on {given!r} failed: {failure.strerror or failure}", given)

    def _run(self, given: str, arguments: P) -> ToolResult:
        raise NotImplementedError


class ReadArguments(PathArguments):
    """file_read's arguments: the file, and optionally a range of its lines."""

    offset: int = Field(1, ge=1, description="First line to read (1-based). Default 1.")
    limit: int | None = Field(
        None, ge=1, description="Number of lines to read. Default: to the end."
    )


class FileRead(_WorkspaceTool[ReadArguments]):
    """Read a text file, or a range of its lines, capped at `max_read_bytes`.

    FileRead(workspace, max_read_bytes=50_000, on_security=print)
    """

    name = "file_read"
    Arguments = ReadArguments

    def __init__(self, workspace: Path, *, max_read_bytes: int, on_security: SecurityHook) -> None:
        super().__init__(workspace, on_security=on_security)
        self.max_read_bytes = max_read_bytes

    def description(self) -> str:
        return (
            "Read a UTF-8 text file in the workspace. Use offset and limit to read a range "
            f"of lines; output is capped at {self.max_read_bytes} bytes."
        )

    def _run(self, given: str, arguments: ReadArguments) -> ToolResult:
        offset, limit = arguments.offset, arguments.limit
        try:
            with self.files.walk(given, final=FINAL_FILE) as found:
                shown_path = found.shown
                shown = self._excerpt(found.fd, shown_path, offset, limit)
        except (Missing, NotADirectory) as missing:
            shown = missing.shown if isinstance(missing, Missing) else posixpath.normpath(given)
            raise _Refusal(f"file not found: {shown}; use list_dir to see what exists") from None
        return self._result(shown_path, shown, offset)

    def _excerpt(self, fd: int, shown_path: str, offset: int, limit: int | None) -> Excerpt:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise _Refusal(f"{shown_path} is a directory; use list_dir to list it")
        if not stat.S_ISREG(info.st_mode):
            raise _Refusal(f"{shown_path} is not a regular file")
        if info.st_nlink > 1:
            raise _HardLink(
                f"{shown_path} has {info.st_nlink} hard links, and a file with more than one "
                "may be a file outside the workspace; file_read only reads files with one link"
            )
        scanner = LineScanner(offset, limit, self.max_read_bytes)
        try:
            counted = scan(fd, info.st_size, scanner)
        except _Refusal:
            raise _Refusal(
                f"{shown_path} looks like a binary file (it contains NUL bytes); "
                "use shell_exec (e.g. file, xxd | head) to inspect it"
            ) from None
        return scanner.finish(counted=counted)

    def _result(self, shown_path: str, shown: Excerpt, offset: int) -> ToolResult:
        if shown.total == 0 and offset == 1 and shown.counted:
            return ToolResult(f"[{shown_path} is empty]", meta=_read_meta(shown_path, shown))
        if offset > shown.total and shown.last < shown.first:
            if not shown.counted:
                raise _Refusal(
                    f"offset {offset} is past the {shown.total} lines file_read scanned of "
                    f"{shown_path} in {READ_SECS:g} s; use shell_exec (e.g. sed -n "
                    f"'{offset},+99p') to read that far"
                )
            raise _Refusal(
                f"offset {offset} is past the end of {shown_path}, which has {shown.total} lines"
            )
        note = excerpt_note(shown, self.max_read_bytes)
        content = shown.text if note is None else _append_line(shown.text, note)
        return ToolResult(content, meta=_read_meta(shown_path, shown))


def _read_meta(path: str, shown: Excerpt) -> dict[str, Any]:
    lines = shown.last - shown.first + 1 if shown.total else 0
    return {"path": path, "lines": lines, "bytes": shown.size, "total_lines": shown.total}


def _append_line(text: str, line: str) -> str:
    separator = "" if text == "" or text.endswith("\n") else "\n"
    return f"{text}{separator}{line}"


class WriteArguments(PathArguments):
    """file_write's arguments: the file and its whole new content."""

    content: str = Field(description="The complete new file content.")


class FileWrite(_WorkspaceTool[WriteArguments]):
    """Create or replace a UTF-8 text file, creating missing parent directories.

    FileWrite(workspace, on_security=print)
    """

    name = "file_write"
    Arguments = WriteArguments

    def description(self) -> str:
        return (
            "Create or overwrite a text file in the workspace with the given content. "
            "Missing parent directories are created."
        )

    def _run(self, given: str, arguments: WriteArguments) -> ToolResult:
        content = arguments.content
        if holds_stand_in(content):
            raise _Refusal(
                "the content holds what the history keeps of an earlier write in place of its "
                f"text, not the text itself; {given} was left as it is. Write the whole content."
            )
        data = content.encode("utf-8", errors="replace")
        try:
            with self.files.walk(given, final=FINAL_ENTRY, create_dirs=True) as found:
                shown_path = found.shown
                if found.name is None or _is_directory(found.fd, found.name):
                    raise _Refusal(f"{shown_path} is a directory; give the path of a file to write")
                replace_in(found.fd, found.name, data, durable=False)
        except NotADirectory as blocked:
            raise _Refusal(
                f"cannot create {given}: {blocked.shown} is a file, not a directory"
            ) from None
        lines = count_lines(content)
        return ToolResult(
            f"wrote {len(data)} bytes ({lines} lines) to {shown_path}",
            meta={"path": shown_path, "bytes": len(data), "lines": lines},
        )


def _is_directory(directory: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


class ListArguments(PathArguments):
    """list_dir's arguments: the directory, the workspace itself when omitted."""

    path: str = Field(".", description="Directory path, relative to the workspace. Default '.'.")


class ListDir(_WorkspaceTool[ListArguments]):
    """List a directory: sorted names, `name/` for directories, sizes for files.

    ListDir(workspace, on_security=print, max_entries=500)
    """

    name = "list_dir"
    Arguments = ListArguments

    def __init__(
        self, workspace: Path, *, on_security: SecurityHook, max_entries: int = DEFAULT_MAX_ENTRIES
    ) -> None:
        super().__init__(workspace, on_security=on_security)
        self.max_entries = max_entries

    def description(self) -> str:
        return "List a directory in the workspace: directories end with '/', files show their size."

    def _run(self, given: str, arguments: ListArguments) -> ToolResult:
        try:
            with self.files.walk(given, final=FINAL_DIR) as found:
                shown_path = found.shown
                with os.scandir(found.fd) as scan_:
                    entries = sorted(scan_, key=lambda entry: entry.name)
                lines = [describe_entry(entry, found.fd) for entry in entries[: self.max_entries]]
        except Missing as missing:
            raise _Refusal(f"directory not found: {missing.shown}") from None
        except NotADirectory as blocked:
            raise _Refusal(
                f"{blocked.shown} is a file, not a directory; use file_read to read it"
            ) from None
        if not entries:
            lines.append(f"[{shown_path} is empty]")
        elif len(entries) > self.max_entries:
            lines.append(
                f"[first {self.max_entries} of {len(entries)} entries shown; "
                "use shell_exec (e.g. ls or find with grep) to see the rest]"
            )
        return ToolResult("\n".join(lines), meta={"path": shown_path, "entries": len(entries)})
