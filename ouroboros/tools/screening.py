"""Screening shell commands against `safety.blocked_patterns`, in time linear in the command.

Patterns run on RE2 (the `google-re2` package), which never backtracks: a 1 MB command takes
milliseconds per pattern, where Python's engine took minutes on the old defaults. A user's
pattern that RE2 cannot run (lookarounds, backreferences) still works, on Python's engine,
with no such bound. Each command is screened as written and in a normalised form that undoes
the cheapest evasions (`r''m`, `\\rm`, `rm${IFS}-rf`, `X=/; rm -rf $X`).

The blocklist is a guard against accidents, not a security boundary: a determined agent gets
past any list of patterns (`$(printf '\\162m')`, `eval`, a script file). The sandbox is the
boundary.

    blocked_by("r''m -rf /", list(DEFAULT_BLOCKED_PATTERNS))  # -> the rm pattern
"""

from __future__ import annotations

import functools
import re
from typing import Protocol

import re2

# Assignments the normaliser substitutes, at most; a command with more keeps the first ones.
MAX_SUBSTITUTED_NAMES = 64

_ASSIGNMENT = re.compile(r"(?:^|[\s;&|(])([A-Za-z_][A-Za-z0-9_]*)=([^\s;&|()`$]*)")
_EXPANSION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_QUOTING = str.maketrans("", "", "'\"\\")
_IFS = ("${IFS}", "$IFS")


class _Searcher(Protocol):
    pattern: str

    def search(self, text: str) -> object: ...


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a pattern RE2 rejects falls back quietly, see compiled()
    return options


# The defaults before they were rewritten for RE2 (they backtracked: minutes on a long
# command), as a user's file may still hold them, each with the pattern now run in its place.
_LEGACY_RM = (
    r"""\brm\s+(?:-\S+\s+)*(?:-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)\s+(?:[^\s;&|]+\s+)*["']?"""
    r"""(?:/|/\*|~/?\*?|\*|\$\{?HOME\}?/?\*?)["']?(?=$|[\s;&|)])"""
)
_RM = (
    r"""\brm\s+(?:-\S+\s+)*(?:-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)\s+(?:[^\s;&|]+\s+)*["']?"""
    r"""(?:/|/\*|~/?\*?|\*|\$\{?HOME\}?/?\*?)["']?(?:$|[\s;&|)])"""
)
_LEGACY_DD = r"\bdd\b[^;&|\n]*\bof=/dev/(?!null\b|zero\b|stdout\b|stderr\b|fd/)"
_DD = r"\bdd\b[^;&|\n]*\bof=/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk|loop|md|dm-|mapper/)"
_LEGACY_FORK_BOMB = r"(?P<f>[\w:]+)\s*\(\)\s*\{[^}]*(?P=f)\s*\|\s*(?P=f)\s*&"
_FORK_BOMB = r"\(\)\s*\{\s*[\w:]+\s*\|\s*[\w:]+\s*&"
_LEGACY_CHMOD = (
    r"""\bchmod\s+(?:-\S+\s+)*(?:0?777|a\+rwx|ugo\+rwx)\s+(?:-\S+\s+)*"""
    r"""["']?/\*?["']?(?=$|[\s;&|)])"""
)
_CHMOD = (
    r"""\bchmod\s+(?:-\S+\s+)*(?:0?777|a\+rwx|ugo\+rwx)\s+(?:-\S+\s+)*"""
    r"""["']?/\*?["']?(?:$|[\s;&|)])"""
)
LEGACY_DEFAULTS: dict[str, str] = {
    _LEGACY_RM: _RM,
    _LEGACY_DD: _DD,
    _LEGACY_FORK_BOMB: _FORK_BOMB,
    _LEGACY_CHMOD: _CHMOD,
}


class _Renamed:
    """A compiled pattern that reports the pattern the user wrote, not the one it runs."""

    def __init__(self, pattern: str, runs: _Searcher) -> None:
        self.pattern = pattern
        self._runs = runs

    def search(self, text: str) -> object:
        return self._runs.search(text)


@functools.lru_cache(maxsize=512)
def compiled(pattern: str) -> _Searcher | None:
    """`pattern` compiled on RE2 if it can be, else on Python's engine; None if neither takes
    it (config validation reports those). An old default runs as its RE2 rewrite."""
    if pattern in LEGACY_DEFAULTS:
        return _Renamed(pattern, re2.compile(LEGACY_DEFAULTS[pattern], _re2_options()))
    try:
        return re2.compile(pattern, _re2_options())
    except re2.error:
        pass
    try:
        return re.compile(pattern)
    except re.error:
        return None


def linear_time(pattern: str) -> bool:
    """Whether `pattern` runs on RE2, in time linear in the command."""
    try:
        re2.compile(pattern, _re2_options())
    except re2.error:
        return False
    return True


def normalised(command: str) -> str:
    """The command with the cheapest evasions undone: `${IFS}` becomes a space, quotes and
    backslashes are dropped (`r''m` -> `rm`), and variables assigned in the command itself
    (`X=/`) are substituted. Linear in the command; meant for screening only.

        normalised("X=/; r'm' -rf $X")  # -> "X=/; rm -rf /"
    """
    text = command
    for spelling in _IFS:
        text = text.replace(spelling, " ")
    text = text.translate(_QUOTING)
    if "=" not in text or "$" not in text:
        return text
    values: dict[str, str] = {}
    for match in _ASSIGNMENT.finditer(text):
        if len(values) >= MAX_SUBSTITUTED_NAMES:
            break
        values.setdefault(match.group(1), match.group(2))
    if values:
        text = _EXPANSION.sub(lambda m: values.get(m.group(1) or m.group(2), m.group(0)), text)
    return text


def blocked_by(command: str, patterns: list[str]) -> str | None:
    """The first pattern in `patterns` found anywhere in `command` (as written, or in its
    normalised form), or None. An invalid pattern is skipped here; config validation is
    where it gets reported.

        blocked_by("rm -rf /", [r"rm\\s+-rf\\s+/(\\s|$)"])  # -> the pattern
    """
    searchers = [found for found in map(compiled, patterns) if found is not None]
    forms = [command]
    flat = normalised(command)
    if flat != command:
        forms.append(flat)
    for searcher in searchers:
        if any(searcher.search(form) is not None for form in forms):
            return searcher.pattern
    return None
