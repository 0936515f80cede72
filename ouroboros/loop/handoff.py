"""The handoff a restarted session begins with, built by the harness from what the session
before logged, not by the model: the files it wrote, its last commands and their exit codes,
the calls cut short or failing again and again, the agent's wind-down note, and counts.

A `Digest` folds the session's events as they are logged (it listens to the log), keeping
only a bounded summary; at a restart `handoff_text` renders it within a token budget, and the
new session gets it after the restart note, before the turns carried over.

    digest = Digest()
    log.subscribe(digest.take)
    ...
    text = handoff_text(digest, session=3, reason="context full", max_tokens=600,
                        chars_per_token=3.5)
    digest.clear()
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from ouroboros.store import events as ev
from ouroboros.window import ledger as tk

MAX_FILES = 30
MAX_COMMANDS = 5
MAX_FAILURES = 20
MAX_INTERRUPTED = 5
NOTE_CHARS = 300
SHOWN_CHARS = 80
HANDOFF_SHARE = 20  # of the prompt's budget, at most
WRITING_TOOLS = ("file_write", "file_edit")


def one_line(text: str, limit: int = SHOWN_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class Digest:
    """What one session did, folded from its events; bounded whatever the session's length."""

    turns: int = 0
    calls: int = 0
    failed: int = 0
    files: OrderedDict[str, int] = field(default_factory=OrderedDict)  # path -> writes
    files_dropped: int = 0
    commands: deque[tuple[str, int | None]] = field(
        default_factory=lambda: deque(maxlen=MAX_COMMANDS))
    failures: Counter[str] = field(default_factory=Counter)  # "tool target" -> times
    last_failure: dict[str, str] = field(default_factory=dict)  # its latest first line
    interrupted: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_INTERRUPTED))
    wound_down: bool = False
    note: str = ""  # what the agent said after it was told to wind down
    pending: dict[str, tuple[str, str]] = field(default_factory=dict)  # id -> (name, target)

    def take(self, event: Any) -> None:
        """Fold one logged event in."""
        match event:
            case ev.Assistant(text=text):
                self.turns += 1
                if self.wound_down and text.strip() and not self.note:
                    self.note = one_line(text, NOTE_CHARS)  # its answer to the wind-down
            case ev.ToolCallEvent(id=call_id, name=name, arguments=arguments, subject=subject):
                self.calls += 1  # named by what its tool says it is about (Toolbox.subject)
                self.pending = {call_id: (name, one_line(subject or arguments))}
            case ev.ToolResultEvent():
                self.result(event)
            case ev.WindDown():
                self.wound_down = True

    def result(self, event: ev.ToolResultEvent) -> None:
        name, target = self.pending.pop(event.id, (event.name, ""))
        what = f"{name} {target}".rstrip()
        if event.interrupted:
            self.interrupted.append(what)
            return
        if name == "shell_exec":
            self.commands.append((target, event.exit_code))
        if not event.ok:
            self.failed += 1
            self.count_failure(what, event.summary)
        elif name in WRITING_TOOLS and target:
            self.wrote(target)

    def count_failure(self, what: str, summary: str) -> None:
        if what not in self.failures and len(self.failures) >= MAX_FAILURES:
            rarest = min(self.failures, key=lambda key: self.failures[key])
            del self.failures[rarest]
            self.last_failure.pop(rarest, None)
        self.failures[what] += 1
        self.last_failure[what] = one_line(summary)

    def wrote(self, path: str) -> None:
        self.files[path] = self.files.pop(path, 0) + 1
        if len(self.files) > MAX_FILES:
            self.files.popitem(last=False)
            self.files_dropped += 1

    def top_failure(self) -> str:
        """The call that failed most often, for the restart-storm brake's message."""
        if not self.failures:
            return ""
        what, times = self.failures.most_common(1)[0]
        return f"{what}, {times} times: {self.last_failure.get(what, '')}".rstrip(": ")

    def clear(self) -> None:
        """Begin the next session's digest."""
        self.__dict__.update(Digest().__dict__)


def sections(digest: Digest, files: int, commands: int, failures: int) -> list[str]:
    """The handoff's lines, showing at most so many of each list."""
    lines = []
    if digest.files and files:
        shown = list(digest.files.items())[-files:]
        more = len(digest.files) - len(shown) + digest.files_dropped
        listed = ", ".join(f"{path} ({n} writes)" if n > 1 else path for path, n in shown)
        lines.append(f"Files written: {listed}" + (f" and {more} more" if more else ""))
    if digest.commands and commands:
        listed = "; ".join(f"`{command}` -> {'timed out' if code is None else f'exit {code}'}"
                           for command, code in list(digest.commands)[-commands:])
        lines.append(f"Last commands: {listed}")
    repeated = [(what, n) for what, n in digest.failures.most_common(failures) if n > 1]
    if repeated:
        listed = "; ".join(f"{what} ({n} times): {digest.last_failure.get(what, '')}"
                           for what, n in repeated)
        lines.append(f"Failing repeatedly: {listed}")
    if digest.interrupted:
        lines.append(f"Cut short (may or may not have taken effect): "
                     f"{'; '.join(digest.interrupted)}")
    if digest.note:
        lines.append(f'Your note when told to wind down: "{digest.note}"')
    return lines


def handoff_text(digest: Digest, *, session: int, reason: str, max_tokens: int,
                 chars_per_token: float) -> str:
    """The handoff for the session after `session`, within `max_tokens`; "" when it has
    nothing to say or no budget."""
    if max_tokens <= 0 or not (digest.turns or digest.calls):
        return ""
    head = (f"[Handoff from session {session}, built by the harness from its log "
            f"({reason}): {digest.turns} turns, {digest.calls} tool calls, "
            f"{digest.failed} failed.")
    limit = int(max_tokens * chars_per_token)
    for files, commands, failures in ((MAX_FILES, MAX_COMMANDS, 5), (10, 3, 3), (5, 2, 2),
                                      (3, 1, 1), (0, 0, 0)):
        text = "\n".join([head, *sections(digest, files, commands, failures)]) + "]"
        if len(text) <= limit:
            return text
    return text[: max(limit - 4, 0)] + "...]"


def handoff_budget(max_tokens: int, prompt_budget: int) -> int:
    """The handoff's budget: `context.handoff_max_tokens`, at most a twentieth of the
    prompt's budget (it is pinned before the turns carried over, so it takes their room)."""
    return min(max_tokens, prompt_budget // HANDOFF_SHARE)


def tokens_of(text: str, chars_per_token: float) -> int:
    return tk.estimate_chars(len(text), chars_per_token)
