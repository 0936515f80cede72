"""The real tier's fixtures: llama.cpp's own server with SmolLM2-135M-Instruct.

The whole tier is skipped, with one line, where there is no llama-server or the model cannot be
downloaded (see llama.py). Every test module here is marked `real` (`pytestmark`); the default
run leaves them out (pyproject.toml), `python -m pytest -m real` runs them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from tests.real.llama import NO_SERVER, TOOLS_TEMPLATE, LlamaServer, cache_dir, fetch_model, \
    find_binary, runnable


@pytest.fixture(scope="session")
def llama_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    binary = find_binary(os.environ)
    if binary is None:
        pytest.skip(NO_SERVER)
    return runnable(binary, tmp_path_factory.mktemp("llama-server"))


@pytest.fixture(scope="session")
def smollm2() -> Path:
    try:
        return fetch_model(cache_dir())
    except (RuntimeError, OSError) as error:
        pytest.skip(f"no model for the real tier: {error}")


@pytest.fixture(scope="session")
def llama_server(llama_binary: Path, smollm2: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """One server for the tier, with the project's chat template that takes tools."""
    log = tmp_path_factory.mktemp("llama-log") / "server.log"
    with LlamaServer(llama_binary, smollm2, TOOLS_TEMPLATE, log=log) as server:
        yield server


@pytest.fixture
def toolless_server(llama_binary: Path, smollm2: Path, tmp_path: Path) -> Iterator[LlamaServer]:
    """A server with the model's own chat template, which has no tools."""
    with LlamaServer(llama_binary, smollm2, None, log=tmp_path / "server.log") as server:
        yield server
