"""What keeps the agent's tools inside its workspace and away from the harness's secrets:
the escape error and the security hook (paths are opened by workspace.py), the command
blocklist (screening.py) and the shell's environment."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ouroboros.tools.screening import blocked_by

__all__ = ["PathEscape", "SecurityHook", "blocked_by", "shell_environment"]

HARNESS_ENV_PREFIX = "OUROBOROS_"

# Told about refused paths and commands:
# {"kind": "path_escape" | "hard_link" | "blocked_command", "tool": ..., "path" | "command": ...}
SecurityHook = Callable[[dict[str, Any]], None]


class PathEscape(ValueError):
    """A model-given path that resolves outside the workspace."""


# The supervisor's channels to the harness: a tool's process must not speak for it (a
# command sending READY=1 or WATCHDOG=1 would tell systemd a hung harness is alive).
SUPERVISOR_ENV = (
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
)


def shell_environment(base: Mapping[str, str], secret_names: list[str]) -> dict[str, str]:
    """A copy of `base` for shell commands, without the named secrets (such as the API key
    variable), the supervisor's channels (SUPERVISOR_ENV) and any of the harness's own
    `OUROBOROS_*` variables."""
    hidden = {*secret_names, *SUPERVISOR_ENV}
    return {
        name: value
        for name, value in base.items()
        if name not in hidden and not name.startswith(HARNESS_ENV_PREFIX)
    }
