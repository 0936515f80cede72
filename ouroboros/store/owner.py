"""Which project a state dir serves: `<state_dir>/project.json` names the project (the
directory of its ouroboros.toml), the workspace its runs work in and the state dir itself. A
second project pointed at the same state dir is refused (it would continue the first
project's run in its own workspace). A project that has moved (the directory it names is
gone), and a state dir that was copied or moved (with a copy of its project, say), are taken
over: what is refused is sharing, not moving.

    claim_state_dir(state_dir, project=Path("/p"), workspace=Path("/p/workspace"))
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ouroboros.errors import ConfigError
from ouroboros.store.atomic import write_atomically
from ouroboros.store.files import read_regular
from ouroboros.store.log import cannot_write

OWNER_FILE = "project.json"
MAX_OWNER_BYTES = 64 * 1024  # three paths


def read_owner(state_dir: Path) -> dict[str, Any] | None:
    """What project.json says, or None when there is none (or it cannot be read: a link, a
    FIFO or a device there is never read through)."""
    try:
        owner = json.loads(read_regular(state_dir / OWNER_FILE, MAX_OWNER_BYTES))
    except (OSError, ValueError):
        return None
    return owner if isinstance(owner, dict) and isinstance(owner.get("project"), str) else None


def refusal(state_dir: Path, owner: dict[str, Any] | None, project: Path) -> str | None:
    """Why `project` may not use the state dir `owner` was read from; None when it may: no
    owner yet, the same project, a project that no longer exists (it moved), or a record
    written for another path (the state dir was copied or moved)."""
    if (
        owner is None
        or Path(owner["project"]) == project
        or not Path(owner["project"]).exists()
        or owner.get("state_dir", str(state_dir)) != str(state_dir)
    ):
        return None
    return (
        f"state dir {state_dir} belongs to project {owner['project']} (workspace "
        f"{owner.get('workspace', '?')}), not to {project}; give this project a state dir "
        "of its own (logging.state_dir)"
    )


def check_state_dir(state_dir: Path, project: Path) -> None:
    """Raise ConfigError when another project owns `state_dir` (reading only)."""
    why_not = refusal(state_dir, read_owner(state_dir), project)
    if why_not is not None:
        raise ConfigError(why_not)


def claim_state_dir(state_dir: Path, *, project: Path, workspace: Path) -> None:
    """Record that `state_dir` serves `project` with `workspace`, or raise ConfigError naming
    both projects when another one owns it. Call with the state dir's lock held."""
    owner = read_owner(state_dir)
    why_not = refusal(state_dir, owner, project)
    if why_not is not None:
        raise ConfigError(why_not)
    mine = {"project": str(project), "workspace": str(workspace), "state_dir": str(state_dir)}
    if owner != mine:
        path = state_dir / OWNER_FILE
        with cannot_write(path):
            state_dir.mkdir(parents=True, exist_ok=True)
            write_atomically(path, json.dumps(mine) + "\n")
