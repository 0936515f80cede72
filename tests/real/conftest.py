"""The real tier's fixtures: llama.cpp's own server with SmolLM2-135M-Instruct.

The whole tier is skipped, with one line, where there is no llama-server or the model cannot be
downloaded (see llama.py). Every test module here is marked `real` (`pytestmark`); the default
run leaves them out (pyproject.toml), `python -m pytest -m real` runs them.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Iterator

import pytest

from tests.real.llama import (
    NO_SERVER,
    TOOLS_TEMPLATE,
    LlamaServer,
    cache_dir,
    fetch_model,
    find_binary,
    runnable,
)


@functools.cache
def missing() -> str | None:
    """Why the tier cannot run here (no binary, no model), or None; the model is downloaded
    the first time it is asked."""
    if find_binary(os.environ) is None:
        return NO_SERVER
    try:
        fetch_model(cache_dir())
    except (RuntimeError, OSError) as error:
        return f"no model for the real tier: {error}"
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip every test of the tier for one reason, raised here (not in a fixture, which
    pytest reports at each test's line): `-rs` shows one line for the whole tier."""
    reason = missing()
    if reason is not None:
        raise pytest.skip.Exception(reason)


@pytest.fixture(scope="session")
def llama_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    binary = find_binary(os.environ)
    assert binary is not None
    return runnable(binary, tmp_path_factory.mktemp("llama-server"))


@pytest.fixture(scope="session")
def smollm2() -> Path:
    return fetch_model(cache_dir())


@pytest.fixture(scope="session")
def llama_server(
    llama_binary: Path, smollm2: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    """One server for the tier, with the project's chat template that takes tools."""
    log = tmp_path_factory.mktemp("llama-log") / "server.log"
    with LlamaServer(llama_binary, smollm2, TOOLS_TEMPLATE, log=log) as server:
        yield server


@pytest.fixture
def toolless_server(llama_binary: Path, smollm2: Path, tmp_path: Path) -> Iterator[LlamaServer]:
    """A server with the model's own chat template, which has no tools."""
    with LlamaServer(llama_binary, smollm2, None, log=tmp_path / "server.log") as server:
        yield server
