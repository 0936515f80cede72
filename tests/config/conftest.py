"""Every config test runs in an empty directory, with a project file and a user file at hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.files import write


@pytest.fixture(autouse=True)
def empty_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run every test in an empty directory, so ./ouroboros.toml is never a stray file."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write(tmp_path / "proj" / "ouroboros.toml", '[model]\nname = "from-project"\n')


@pytest.fixture
def user(tmp_path: Path) -> Path:
    return write(tmp_path / "home" / "ouroboros.toml", '[model]\nname = "from-user"\n')
