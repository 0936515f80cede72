"""Pure checks that keep the agent's tools inside its workspace and away from the harness's
secrets: path confinement, the command blocklist and the shell's environment."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

HARNESS_ENV_PREFIX = "OUROBOROS_"

# Told about refused paths and blocked commands: {"kind": "path_escape" | "blocked_command", ...}
SecurityHook = Callable[[dict[str, Any]], None]


class PathEscape(ValueError):
    """A model-given path that resolves outside the workspace."""


def confine(workspace: Path, path: str) -> Path:
    """Resolve a model-given path (relative to the workspace, or absolute), following `..` and
    symlinks, and raise PathEscape unless the result lies inside the workspace.

        confine(Path("/ws"), "notes/a.md")  # -> Path("/ws/notes/a.md")

    Raises plain ValueError for a path that cannot be resolved at all (NUL byte, symlink loop).
    """
    if "\x00" in path:
        raise ValueError(f"path {path!r} contains a NUL byte")
    root = workspace.resolve()
    try:
        target = (root / path).resolve(strict=False)
    except RuntimeError as error:  # Python 3.11 reports a symlink loop this way
        raise ValueError(f"path {path!r} cannot be resolved: {error}") from error
    if not target.is_relative_to(root):
        raise PathEscape(
            f"path {path!r} is outside the workspace ({root}); "
            "use a path inside it, preferably relative to it"
        )
    return target


def blocked_by(command: str, patterns: list[str]) -> str | None:
    """The first regex in `patterns` found anywhere in `command`, or None.

        blocked_by("rm -rf /", [r"rm\\s+-rf\\s+/(\\s|$)"])  # -> the pattern

    An invalid regex is skipped here; config validation is where it gets reported.
    """
    for pattern in patterns:
        try:
            if re.search(pattern, command):
                return pattern
        except re.error:
            continue
    return None


def shell_environment(base: Mapping[str, str], secret_names: list[str]) -> dict[str, str]:
    """A copy of `base` for shell commands, without the named secrets (such as the API key
    variable) and without any of the harness's own `OUROBOROS_*` variables."""
    hidden = set(secret_names)
    return {
        name: value
        for name, value in base.items()
        if name not in hidden and not name.startswith(HARNESS_ENV_PREFIX)
    }
