"""Shared fixtures."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from typing import Any, Callable, Iterator

import pytest
import typer.testing

from ouroboros.testing import ScriptedServer

# With PYTHONDONTWRITEBYTECODE set (some machines set it), every `ouroboros` process a test
# starts would compile the whole package again, and every xdist worker would rewrite every test
# module's asserts again: a third of the suite's CPU. The suite's processes (the workers and
# every process they start inherit the environment) read and write bytecode as Python does by
# default: beside the sources, in `__pycache__` (ignored by git), where pip already put the
# installed packages'. (A PYTHONPYCACHEPREFIX would ignore those and compile them all again.)
if sys.dont_write_bytecode:
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


# typer's CliRunner builds the click command from the app again at every invoke (every
# command's signature and type hints read again: ~15 ms of CPU each time, a few hundred
# times in the suite); the suite builds it once per app and set of commands.
def _built_once(get_command: Callable[[Any], Any]) -> Callable[[Any], Any]:
    built: dict[tuple[int, int, int], tuple[Any, Any]] = {}

    def command(app: Any) -> Any:
        key = (id(app), len(app.registered_commands), len(app.registered_groups))
        if key not in built:  # the app is kept with its command: its id is given to no other
            built[key] = (app, get_command(app))
        return built[key][1]

    return command


typer.testing._get_command = _built_once(typer.testing._get_command)

# Workspace locks live in the user's cache dir: keep the tests' out of the real home. (The
# user's own is remembered for what should outlive a run: the real tier's model, tests/real/.)
os.environ.setdefault("TESTS_USER_XDG_CACHE_HOME", os.environ.get("XDG_CACHE_HOME", ""))
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="ouroboros-test-cache-")
atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], True)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """How many workers `-n auto` (pyproject.toml) starts: none under `coverage run`, which
    measures only this process; else PYTEST_XDIST_AUTO_NUM_WORKERS if set, else one per core
    (at least two). Each worker imports and collects the whole suite first (2.6 s of CPU):
    two per core finished sooner on an idle machine but cost 5 CPU-seconds more."""
    coverage = sys.modules.get("coverage")
    if coverage is not None and coverage.Coverage.current() is not None:
        return 0
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return max(2, len(os.sched_getaffinity(0)))


@pytest.fixture
def workspace(tmp_path: Any) -> Any:
    """An empty directory `ws` for tools to work in (tmp_path holds it, and what's outside)."""
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def scripted_server() -> Iterator[Callable[..., ScriptedServer]]:
    """A factory: `scripted_server(script, **options)` starts a ScriptedServer on loopback;
    every server it started is stopped when the test ends, pass or fail."""
    servers: list[ScriptedServer] = []

    def start(script: Any = (), **options: Any) -> ScriptedServer:
        server = ScriptedServer(script, **options)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()
