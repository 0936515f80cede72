"""Messages from a person to a running agent (`ouroboros tell`): each is a file in the state
dir's `inbox/`, written whole (a temporary name, then renamed); a running run takes them at
its next turn boundary, in the order sent, and gives each to the agent as a user message.
With no run going on they wait for the next one (a resume, or a new run).

    post(state_dir, "Skip part 7; it is corrupt.")   # the file it wrote
    for letter in waiting(state_dir): ...; letter.path.unlink()
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ouroboros.errors import UsageError
from ouroboros.store.atomic import replace_in
from ouroboros.store.files import make_private_dir, open_dir, read_regular

INBOX_DIR = "inbox"
MAX_MESSAGE_BYTES = 64 * 1024
MAX_TAKEN = 20  # a turn takes at most so many; the rest wait for the next
MAX_LETTER_BYTES = 8 * MAX_MESSAGE_BYTES  # a message as JSON, every character escaped


@dataclass(frozen=True)
class Letter:
    path: Path
    text: str
    sent: str  # ISO 8601 UTC


def inbox(state_dir: Path) -> Path:
    return state_dir / INBOX_DIR


def checked(text: str) -> str:
    """The message as it will be given; UsageError for one with nothing in it or too long."""
    if not text.strip():
        raise UsageError(
            "the message is empty: give the text to tell the agent "
            '(`ouroboros tell "..."`, or --file with text in it)'
        )
    if len(text.encode()) > MAX_MESSAGE_BYTES:
        raise UsageError(
            f"the message is {len(text.encode()):,} bytes; at most "
            f"{MAX_MESSAGE_BYTES:,} may be sent (put the rest in a workspace file "
            "and tell the agent to read it)"
        )
    return text.strip()


def post(state_dir: Path, text: str) -> Path:
    """Leave `text` for the agent; the file it is in. Raises OSError (one line) when the
    inbox is not a directory of its own (a symbolic link is never followed)."""
    make_private_dir(state_dir)
    box = inbox(state_dir)
    sent = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    name = f"{time.time_ns():020d}-{os.getpid()}.json"
    directory = open_dir(box, make=True)
    try:
        replace_in(
            directory,
            name,
            json.dumps({"text": checked(text), "sent": sent}).encode(),
            durable=False,
        )
    finally:
        os.close(directory)
    return box / name


def waiting(state_dir: Path) -> list[Letter]:
    """The messages waiting, oldest first (at most MAX_TAKEN); one that cannot be read as
    one is given as its raw text. None from an inbox that is a link, nor a letter that is
    not a regular file."""
    box = inbox(state_dir)
    try:
        directory = open_dir(box)
    except OSError:
        return []
    try:
        names = sorted(
            n for n in os.listdir(directory) if n.endswith(".json") and not n.startswith(".")
        )
        return [
            letter
            for name in names[:MAX_TAKEN]
            if (letter := read_letter(directory, box / name)) is not None
        ]
    finally:
        os.close(directory)


def read_letter(directory: int, path: Path) -> Letter | None:
    """The letter `path` (in the inbox open as `directory`), or None when it cannot be read."""
    try:
        raw = read_regular(path.name, MAX_LETTER_BYTES, dir_fd=directory).decode(
            "utf-8", errors="replace"
        )
    except OSError:
        return None
    try:
        record = json.loads(raw)
        return Letter(path, str(record["text"]), str(record.get("sent", "")))
    except (ValueError, KeyError, TypeError):
        return Letter(path, raw, "")
