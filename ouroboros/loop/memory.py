"""The system message: the mission (SYSTEM_PROMPT.md, the person's, out of the agent's reach)
and, after it, the agent's memory: a file in the workspace the agent owns and edits
(`agent.memory_file`, NOTES.md by default), re-read at every session start so what it learns
survives restarts. An AGENTS.md in the workspace (the convention other agents read) is pinned
too, read-only.

Each pinned file has a budget in tokens (`agent.memory_max_tokens`): over it, its newest part
is kept and the agent is told. A file that cannot be pinned (binary, not a file, a link out of
the workspace, unreadable) is left out with one warning; the run goes on.

The system message is only its wire form; what it is made of (the mission's fingerprint and
size, the pinned memory's name) is kept beside it, in its SystemMarks, never sent: so an edit
of SYSTEM_PROMPT.md can be told from one of the memory.

    prompt, warnings = system_message(loaded, previous, chars_per_token)
    prompt.message   # {"role": "system", "content": ...}
    mission_changed(previous, prompt)  # (old chars, new chars), or None
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ouroboros.config import LoadedConfig
from ouroboros.protocols import Message
from ouroboros.tools.safety import PathEscape
from ouroboros.tools.workspace import FINAL_FILE, Missing, NotADirectory, Workspace
from ouroboros.window import ledger

AGENTS_FILE = "AGENTS.md"
# Bytes read per character kept: the most UTF-8 takes, so a budget's worth of text is read
# whole however big the file is.
BYTES_PER_CHAR = 4


@dataclass(frozen=True)
class Pinned:
    """A file as it is pinned: its name, the text kept (None: there is no such file), its
    size in tokens (estimated, of the part read) and whether only its newest part is kept."""

    name: str
    text: str | None
    tokens: int = 0
    cut: bool = False


class Unpinnable(Exception):
    """Why a file is left out of the system message (one line)."""


def read_pinned(workspace: Path, name: str, max_tokens: int, chars_per_token: float) -> Pinned:
    """`name` (in `workspace`) as it would be pinned, its newest part if it is over
    `max_tokens`. Raises Unpinnable when it cannot be pinned.

    The file is opened one component at a time from the workspace, never through a link that
    leads out of it, and read from that fd: a job of the agent's swapping the name for a link
    as it is read makes it unpinnable, never pins a file outside."""
    max_chars = max(int(max_tokens * chars_per_token), 1)
    try:
        with Workspace(workspace).walk(name, final=FINAL_FILE) as found:
            size, data = tail_of(found.fd, name, max_chars * BYTES_PER_CHAR)
    except (Missing, NotADirectory, FileNotFoundError):  # no such file (or no workspace yet)
        return Pinned(name, None)
    except PathEscape:
        raise Unpinnable(f"{name} leads outside the workspace") from None
    except ValueError as error:  # a loop of links
        raise Unpinnable(f"{name} cannot be read: {error}") from None
    except OSError as error:
        raise Unpinnable(f"{name} cannot be read: {error.strerror or error}") from None
    text = decoded(name, data, partial=size > len(data))
    return newest_part(name, text, max_chars, chars_per_token, cut=size > len(data))


def tail_of(fd: int, name: str, most: int) -> tuple[int, bytes]:
    """The size of the file open on `fd` and its last `most` bytes (as far as it reached when
    opened). Raises Unpinnable for anything but a regular file with one link."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise Unpinnable(f"{name} is not a regular file")
    if info.st_nlink > 1:
        raise Unpinnable(
            f"{name} has {info.st_nlink} hard links, and a file with more than "
            "one may be a file outside the workspace; only a file with one link "
            "is pinned"
        )
    size = info.st_size
    start = max(size - most, 0)
    chunks, got = [], 0
    while got < size - start:
        chunk = os.pread(fd, size - start - got, start + got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return size, b"".join(chunks)


def decoded(name: str, data: bytes, *, partial: bool) -> str:
    """Text from the bytes read (the first character may be cut when `partial`). Raises
    Unpinnable for a binary file."""
    if b"\0" in data:
        raise Unpinnable(f"{name} is binary (it has NUL bytes); it should hold text")
    if partial:
        data = data.lstrip(bytes(range(0x80, 0xC0)))  # a character cut in half
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Unpinnable(f"{name} is not UTF-8 text") from None


def newest_part(
    name: str, text: str, max_chars: int, chars_per_token: float, *, cut: bool = False
) -> Pinned:
    """The newest `max_chars` of `text`, from a line's start where one is in reach."""
    tokens = ledger.estimate_chars(len(text), chars_per_token)
    if len(text) <= max_chars and not cut:
        return Pinned(name, text, tokens)
    kept = text[-max_chars:]
    newline = kept.find("\n")
    if 0 <= newline < len(kept) - 1:
        kept = kept[newline + 1 :]
    return Pinned(name, kept, tokens, cut=True)


def memory_section(memory: Pinned, max_tokens: int) -> str:
    """What the system message says about the agent's memory file, and holds of it."""
    name = memory.name
    if memory.text is None:
        return (
            f"(Your memory: write notes to {name} in your workspace; it is pinned here at "
            "every session start.)"
        )
    over = (
        f"\n[{name} is ~{memory.tokens} tokens, over its {max_tokens}-token budget: only "
        "its newest part is shown. Shorten it.]"
        if memory.cut
        else ""
    )
    return (
        f"## Your memory: {name} (yours to edit; re-read and pinned here at every session "
        f"start, so it survives restarts; keep it under ~{max_tokens} tokens){over}\n\n"
        f"{memory.text.rstrip()}"
    )


def agents_section(agents: Pinned, max_tokens: int) -> str:
    over = f" (only its newest part: it is over {max_tokens} tokens)" if agents.cut else ""
    return (
        f"## {agents.name}: the workspace's instructions for agents (read-only: do not "
        f"edit it){over}\n\n{(agents.text or '').rstrip()}"
    )


def compose(mission: str, memory: Pinned | None, agents: Pinned | None, max_tokens: int) -> str:
    """The system message's text: the mission, then the memory, then AGENTS.md."""
    parts = [mission.rstrip()]
    if memory is not None:
        parts.append(memory_section(memory, max_tokens))
    if agents is not None and agents.text is not None:
        parts.append(agents_section(agents, max_tokens))
    return "\n\n---\n\n".join(parts) + "\n"


def pin_budget(memory_max_tokens: int, prompt_budget: int | None) -> int:
    """The tokens each pinned file may take: `agent.memory_max_tokens`, and never more than a
    share of the prompt's budget, so a huge memory file cannot leave a small window no room
    to work (a fresh session must start at most half full)."""
    if prompt_budget is None:
        return memory_max_tokens
    return min(memory_max_tokens, max(prompt_budget // PIN_SHARE, 1))


PIN_SHARE = 8  # each pinned file takes at most an eighth of the prompt's budget


@dataclass(frozen=True)
class SystemMarks:
    """What a system message is made of: a fingerprint of the mission it holds
    (SYSTEM_PROMPT.md's text) and the mission's length, and the memory file it pins (None:
    none). Kept beside the message (the run's state saves them), never sent."""

    mission: str
    mission_chars: int
    memory: str | None = None

    @classmethod
    def of(cls, mission: str, memory: str | None = None) -> SystemMarks:
        return cls(fingerprint(mission), len(mission), memory)


class SystemPrompt(NamedTuple):
    """The system message and its marks (None: not known, as in a state from before them;
    then its whole text counts as the mission).

        SystemPrompt({"role": "system", "content": "Count parts."}, SystemMarks.of("Count parts."))
    """

    message: Message
    marks: SystemMarks | None = None

    @property
    def pinned_memory(self) -> str | None:
        """The memory file's name if the message pins it."""
        return self.marks.memory if self.marks is not None else None

    def mission(self) -> tuple[str, int]:
        """The mission's fingerprint and length."""
        if self.marks is not None:
            return self.marks.mission, self.marks.mission_chars
        content = str(self.message.get("content", ""))
        return fingerprint(content), len(content)


def system_message(
    loaded: LoadedConfig,
    previous: SystemPrompt,
    chars_per_token: float,
    prompt_budget: int | None = None,
) -> tuple[SystemPrompt, list[str]]:
    """The system message as the files are now, with its marks, and a warning for each file
    left out. The previous one if the mission's file has gone; the mission alone if the
    memory's budget is 0."""
    try:
        mission = loaded.system_prompt_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return previous, []
    agent = loaded.config.agent
    max_tokens = pin_budget(agent.memory_max_tokens, prompt_budget)
    if agent.memory_max_tokens == 0:
        return mission_prompt(mission, mission), []
    warnings: list[str] = []
    pinned: list[Pinned | None] = []
    for name in (agent.memory_file, AGENTS_FILE):
        try:
            pinned.append(read_pinned(loaded.workspace, name, max_tokens, chars_per_token))
        except Unpinnable as why:
            pinned.append(None)
            warnings.append(f"{why}: it is left out of the system message (the run goes on)")
    memory, agents = pinned
    if memory is not None and memory.cut:
        limit = (
            f"agent.memory_max_tokens ({agent.memory_max_tokens})"
            if max_tokens == agent.memory_max_tokens
            else f"the {max_tokens} tokens a pinned file may take in this window (an eighth "
            "of the budget)"
        )
        warnings.append(f"{memory.name} is over {limit}: only its newest part is pinned")
    content = compose(mission, memory, agents, max_tokens)
    pins = memory.name if memory is not None and memory.text is not None else None
    return mission_prompt(content, mission, pins), warnings


def mission_prompt(content: str, mission: str, memory: str | None = None) -> SystemPrompt:
    """The system message holding `content`, marked with the `mission` in it and the name of
    the `memory` file it pins."""
    return SystemPrompt({"role": "system", "content": content}, SystemMarks.of(mission, memory))


def fingerprint(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def mission_changed(before: SystemPrompt, now: SystemPrompt) -> tuple[int, int] | None:
    """The mission's size before and now when SYSTEM_PROMPT.md was edited between the two
    system prompts; None when it was not."""
    (old, old_chars), (new, new_chars) = before.mission(), now.mission()
    return None if old == new else (old_chars, new_chars)
