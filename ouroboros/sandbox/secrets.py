"""Keeping the harness's secrets (the API key, a password in the server URL) from the agent.

The first line of defence is that no process the agent runs has them: the shell's environment
leaves them out, the sandbox keeps it from other processes, and `scrub_own_environment`
overwrites them in the harness's own `/proc/<pid>/environ`, which any process of the same user
could otherwise read. The second line is redaction: a tool result, and every event logged, has
each known secret value replaced, so a key a user left in a workspace file never reaches the
model or the log; the reply the model streams is redacted before the terminal shows it
(`StreamRedactor`), a secret split across pieces too.

    redact = Redactor.of(secret_values("OPENAI_API_KEY", base_url, os.environ))
    redact("key is sk-abc123456789")  # -> "key is [redacted secret]"
"""

from __future__ import annotations

import ctypes
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

MIN_SECRET_CHARS = 8  # shorter values would redact ordinary words
REDACTED = "[redacted secret]"


def secret_values(api_key_env: str, base_url: str, env: Mapping[str, str]) -> list[str]:
    """The secrets the harness holds: the API key's value and the server URL's password."""
    values = [env.get(api_key_env, "")] if api_key_env else []
    try:
        values.append(urlsplit(base_url).password or "")
    except ValueError:
        pass
    return [value for value in values if value]


def short_secrets(api_key_env: str, base_url: str, env: Mapping[str, str]) -> list[str]:
    """The secrets too short to be redacted (see MIN_SECRET_CHARS), by name, never value."""
    named = {f"API key in ${api_key_env}": env.get(api_key_env, "") if api_key_env else ""}
    try:
        named["password in model.base_url"] = urlsplit(base_url).password or ""
    except ValueError:
        pass
    return [name for name, value in named.items() if 0 < len(value) < MIN_SECRET_CHARS]


def short_secret_warning(names: list[str]) -> str:
    """The one start-up warning for secrets too short to redact."""
    return (
        f"the {' and the '.join(names)} {'is' if len(names) == 1 else 'are'} under "
        f"{MIN_SECRET_CHARS} characters, too short to tell from ordinary text: not "
        "redacted from the log, the state or tool results"
    )


@dataclass(frozen=True)
class Redactor:
    """Replaces each secret (of at least MIN_SECRET_CHARS characters) in a text; also its
    JSON-escaped form, so a log line is redacted as written."""

    secrets: tuple[str, ...] = ()

    @classmethod
    def of(cls, values: Iterable[str]) -> Redactor:
        forms = set()
        for value in values:
            if len(value) >= MIN_SECRET_CHARS:
                forms.add(value)
                forms.add(json.dumps(value, ensure_ascii=False)[1:-1])
        return cls(tuple(sorted(forms, key=len, reverse=True)))

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def __bool__(self) -> bool:
        return bool(self.secrets)


def held_back(text: str, secrets: Iterable[str]) -> int:
    """How many characters at the end of `text` could be the start of a secret (pure)."""
    longest = 0
    for secret in secrets:
        for size in range(min(len(secret) - 1, len(text)), longest, -1):
            if text.endswith(secret[:size]):
                longest = size
                break
    return longest


class StreamRedactor:
    """Redacts a text that arrives in pieces (the model's reply as it streams) before `sink`
    sees it: the end of what came so far is held back while it could be the start of a
    secret, so a secret split across pieces is caught too. `flush` lets the held end out
    (when the stream has ended)."""

    def __init__(self, redact: Redactor, sink: Callable[[str], None]) -> None:
        self.redact, self.sink, self.held = redact, sink, ""

    def __call__(self, piece: str) -> None:
        text = self.redact(self.held + piece)
        keep = held_back(text, self.redact.secrets)
        self.held = text[len(text) - keep :] if keep else ""
        if out := text[: len(text) - keep]:
            self.sink(out)

    def flush(self) -> None:
        held, self.held = self.held, ""
        if held:
            self.sink(held)


def environment_block(stat: str) -> tuple[int, int] | None:
    """The start and end addresses of a process's initial environment, from the
    `/proc/<pid>/stat` line (fields 50 and 51)."""
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        return int(fields[47]), int(fields[48])
    except (IndexError, ValueError):
        return None


def scrub_own_environment(values: Iterable[str]) -> int:
    """Overwrite each secret in this process's initial environment block, which is what
    `/proc/<pid>/environ` shows (Python keeps its own copy in os.environ). Returns how many
    were overwritten; 0 off Linux."""
    wanted = [value.encode() for value in values if value]
    if not wanted or not sys.platform.startswith("linux"):
        return 0
    try:
        block = environment_block(Path("/proc/self/stat").read_text())
    except OSError:
        return 0
    if block is None or block[1] <= block[0]:
        return 0
    start, end = block
    data = ctypes.string_at(start, end - start)
    count = 0
    for secret in wanted:
        at = data.find(secret)
        while at >= 0:
            ctypes.memset(start + at, ord("*"), len(secret))
            count += 1
            at = data.find(secret, at + len(secret))
    return count
