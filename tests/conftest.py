"""Shared fixtures."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest

from ouroboros.scripted import ScriptedServer


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
