"""The file tools: file_read, file_write and list_dir, each confined to the workspace.

Every result carries `meta` with the workspace-relative path and its size, for the
placeholders that later stand in for masked results. A path outside the workspace is refused
and reported to the `on_security` callback.
"""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ouroboros.protocols import ToolResult
from ouroboros.tools.safety import PathEscape, SecurityHook, confine

BINARY_SNIFF_BYTES = 8192
DEFAULT_MAX_ENTRIES = 500


class _Refusal(Exception):
    """A request the tool turns down with a message for the model."""


@dataclass(frozen=True)
class Excerpt:
    """What file_read shows: lines `first`..`last` (1-based, inclusive) of `total`."""

    text: str
    first: int
    last: int
    total: int
    size: int  # bytes shown
    capped: bool  # stopped early at the byte cap
    line_cut: bool  # the single line shown is longer than the cap and was cut


def excerpt(lines: Iterable[bytes], offset: int, limit: int | None, max_bytes: int) -> Excerpt:
    """Pick lines `offset`.. (at most `limit` of them, at most `max_bytes` bytes) from `lines`,
    counting them all. A first line longer than `max_bytes` is cut rather than skipped."""
    end = None if limit is None else offset + limit - 1
    shown: list[bytes] = []
    size = 0
    total = 0
    capped = line_cut = False
    for number, line in enumerate(lines, start=1):
        total = number
        if number < offset or (end is not None and number > end) or capped:
            continue
        if size + len(line) > max_bytes:
            capped = True
            if not shown:
                shown.append(line[:max_bytes])
                size = max_bytes
                line_cut = True
            continue
        shown.append(line)
        size += len(line)
    text = b"".join(shown).decode("utf-8", errors="replace")
    return Excerpt(text, offset, offset + len(shown) - 1, total, size, capped, line_cut)


def excerpt_note(shown: Excerpt, max_bytes: int) -> str | None:
    """The trailing note telling the model what part of the file it got and how to get more."""
    if shown.line_cut:
        rest = (
            f"; call file_read with offset={shown.last + 1} for the next line"
            if shown.last < shown.total
            else ""
        )
        return (
            f"[line {shown.first} is longer than {max_bytes} bytes and only its start is shown; "
            f"use shell_exec (e.g. cut -c or fold) to see the rest of it{rest}]"
        )
    if shown.first == 1 and shown.last == shown.total:
        return None
    span = f"[lines {shown.first}-{shown.last} of {shown.total} shown"
    if shown.last == shown.total:
        return span + "]"
    more = f"call file_read with offset={shown.last + 1} to read more"
    if shown.capped:
        return f"{span}; output capped at {max_bytes} bytes; {more}]"
    return f"{span}; {more}]"


def count_lines(text: str) -> int:
    """Lines as file_read counts them: a final line without a newline still counts."""
    return text.count("\n") + (0 if text == "" or text.endswith("\n") else 1)


def workspace_relative(workspace: Path, target: Path) -> str:
    return target.relative_to(workspace.resolve()).as_posix()


def write_atomically(target: Path, data: bytes) -> None:
    """Write to a temporary file beside `target`, then rename it over `target`, keeping the
    permissions of the file it replaces."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".ouroboros-{uuid.uuid4().hex[:12]}.tmp")
    try:
        temporary.write_bytes(data)
        if target.exists():
            os.chmod(temporary, stat.S_IMODE(target.stat().st_mode))
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def describe_entry(entry: os.DirEntry[str]) -> str:
    """One list_dir line: `name/` for a directory, `name (N bytes)` for a file, and the link
    target for a symlink."""
    try:
        if entry.is_symlink():
            slash = "/" if entry.is_dir() else ""
            return f"{entry.name}{slash} -> {os.readlink(entry.path)}"
        if entry.is_dir():
            return f"{entry.name}/"
        return f"{entry.name} ({entry.stat().st_size} bytes)"
    except OSError:
        return f"{entry.name} (unreadable)"


def _function(
    name: str, description: str, properties: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


def _error(message: str, path: str) -> ToolResult:
    return ToolResult(f"error: {message}", ok=False, meta={"path": path})


class _WorkspaceTool:
    """Shared plumbing: confine the path, turn refusals and OS errors into error results."""

    name: str
    default_path: str | None = None

    def __init__(self, workspace: Path, *, on_security: SecurityHook) -> None:
        self.workspace = workspace
        self.on_security = on_security

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        given = arguments.get("path", self.default_path)
        if not isinstance(given, str):
            return _error("the path argument must be a string", str(given))
        try:
            return self._run(confine(self.workspace, given), arguments)
        except PathEscape as escape:
            self.on_security({"kind": "path_escape", "tool": self.name, "path": given})
            return _error(str(escape), given)
        except (_Refusal, ValueError) as refusal:
            return _error(str(refusal), given)
        except OSError as failure:
            return _error(f"{self.name} on {given!r} failed: {failure.strerror or failure}", given)

    def _run(self, target: Path, arguments: dict[str, Any]) -> ToolResult:
        raise NotImplementedError

    def _shown(self, target: Path) -> str:
        return workspace_relative(self.workspace, target)


class FileRead(_WorkspaceTool):
    """Read a text file, or a range of its lines, capped at `max_read_bytes`.

    FileRead(workspace, max_read_bytes=50_000, on_security=log.security)
    """

    name = "file_read"

    def __init__(self, workspace: Path, *, max_read_bytes: int, on_security: SecurityHook) -> None:
        super().__init__(workspace, on_security=on_security)
        self.max_read_bytes = max_read_bytes

    def schema(self) -> dict[str, Any]:
        return _function(
            self.name,
            "Read a UTF-8 text file in the workspace. Use offset and limit to read a range of "
            f"lines; output is capped at {self.max_read_bytes} bytes.",
            {
                "path": {"type": "string", "description": "File path, relative to the workspace."},
                "offset": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "First line to read (1-based). Default 1.",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Number of lines to read. Default: to the end.",
                },
            },
            ["path"],
        )

    def _run(self, target: Path, arguments: dict[str, Any]) -> ToolResult:
        offset: int = arguments.get("offset", 1)
        limit: int | None = arguments.get("limit")
        shown_path = self._shown(target)
        if offset < 1:
            raise _Refusal(f"offset must be 1 or more (the first line is 1), got {offset}")
        if limit is not None and limit < 1:
            raise _Refusal(f"limit must be 1 or more, got {limit}")
        if not target.exists():
            raise _Refusal(f"file not found: {shown_path}; use list_dir to see what exists")
        if target.is_dir():
            raise _Refusal(f"{shown_path} is a directory; use list_dir to list it")
        if not target.is_file():
            raise _Refusal(f"{shown_path} is not a regular file")
        with target.open("rb") as handle:
            if b"\x00" in handle.read(BINARY_SNIFF_BYTES):
                raise _Refusal(
                    f"{shown_path} looks like a binary file (it contains NUL bytes); "
                    "use shell_exec (e.g. file, xxd | head) to inspect it"
                )
            handle.seek(0)
            shown = excerpt(handle, offset, limit, self.max_read_bytes)
        if shown.total == 0 and offset == 1:
            return ToolResult(f"[{shown_path} is empty]", meta=_read_meta(shown_path, shown))
        if offset > shown.total:
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


class FileWrite(_WorkspaceTool):
    """Create or replace a UTF-8 text file, creating missing parent directories.

    FileWrite(workspace, on_security=log.security)
    """

    name = "file_write"

    def schema(self) -> dict[str, Any]:
        return _function(
            self.name,
            "Create or overwrite a text file in the workspace with the given content. "
            "Missing parent directories are created.",
            {
                "path": {"type": "string", "description": "File path, relative to the workspace."},
                "content": {"type": "string", "description": "The complete new file content."},
            },
            ["path", "content"],
        )

    def _run(self, target: Path, arguments: dict[str, Any]) -> ToolResult:
        content: str = arguments["content"]
        shown_path = self._shown(target)
        if target.is_dir():
            raise _Refusal(f"{shown_path} is a directory; give the path of a file to write")
        for parent in target.parents:
            if parent.exists() and not parent.is_dir():
                raise _Refusal(
                    f"cannot create {shown_path}: {self._shown(parent)} is a file, not a directory"
                )
        data = content.encode("utf-8", errors="replace")
        write_atomically(target, data)
        lines = count_lines(content)
        return ToolResult(
            f"wrote {len(data)} bytes ({lines} lines) to {shown_path}",
            meta={"path": shown_path, "bytes": len(data), "lines": lines},
        )


class ListDir(_WorkspaceTool):
    """List a directory: sorted names, `name/` for directories, sizes for files.

    ListDir(workspace, on_security=log.security, max_entries=500)
    """

    name = "list_dir"
    default_path = "."

    def __init__(
        self, workspace: Path, *, on_security: SecurityHook, max_entries: int = DEFAULT_MAX_ENTRIES
    ) -> None:
        super().__init__(workspace, on_security=on_security)
        self.max_entries = max_entries

    def schema(self) -> dict[str, Any]:
        return _function(
            self.name,
            "List a directory in the workspace: directories end with '/', files show their size.",
            {
                "path": {
                    "type": "string",
                    "description": "Directory path, relative to the workspace. Default '.'.",
                }
            },
            [],
        )

    def _run(self, target: Path, arguments: dict[str, Any]) -> ToolResult:
        shown_path = self._shown(target)
        if not target.exists():
            raise _Refusal(f"directory not found: {shown_path}")
        if not target.is_dir():
            raise _Refusal(f"{shown_path} is a file, not a directory; use file_read to read it")
        with os.scandir(target) as scan:
            entries = sorted(scan, key=lambda entry: entry.name)
        lines = [describe_entry(entry) for entry in entries[: self.max_entries]]
        if not entries:
            lines.append(f"[{shown_path} is empty]")
        elif len(entries) > self.max_entries:
            lines.append(
                f"[first {self.max_entries} of {len(entries)} entries shown; "
                "use shell_exec (e.g. ls or find with grep) to see the rest]"
            )
        return ToolResult("\n".join(lines), meta={"path": shown_path, "entries": len(entries)})
