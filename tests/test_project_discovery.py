"""Finding the project as git finds its repository: the nearest ouroboros.toml upward."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ouroboros.cli import app
from ouroboros.config import find_project, load_config
from tests.ui_sample import RUN_ID, write_sample_run


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with a finished run and a nested workspace; returns the project directory."""
    root = tmp_path / "proj"
    (root / "workspace" / "src" / "deep").mkdir(parents=True)
    (root / "ouroboros.toml").write_text("[context]\nsoft_threshold_pct = 0.7\n")
    (root / "SYSTEM_PROMPT.md").write_text("Work.")
    write_sample_run(root / ".ouroboros")
    return root


def invoke(*args: str) -> object:
    env = {
        "COLUMNS": "100",
        "XDG_CONFIG_HOME": "/nonexistent-ouroboros-test",
        "OUROBOROS_LOGGING_STATE_DIR": None,
        "OUROBOROS_AGENT_WORKSPACE": None,
    }
    return CliRunner(env=env).invoke(app, list(args))


# -- find_project --


def test_finds_the_project_file_from_a_subdirectory(project):
    assert find_project(project / "workspace" / "src" / "deep") == project / "ouroboros.toml"


def test_finds_the_project_file_in_the_directory_itself(project):
    assert find_project(project) == project / "ouroboros.toml"


def test_the_nearest_project_wins(project):
    inner = project / "workspace" / "src"
    (inner / "ouroboros.toml").write_text("")

    assert find_project(inner / "deep") == inner / "ouroboros.toml"


def test_no_project_anywhere_above(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)

    assert find_project(tmp_path / "a" / "b") is None


def test_a_directory_named_like_the_file_is_not_a_project(tmp_path):
    (tmp_path / "ouroboros.toml").mkdir()

    assert find_project(tmp_path) is None


def test_load_config_from_a_subdirectory_uses_the_projects_root(project, monkeypatch):
    monkeypatch.chdir(project / "workspace" / "src")

    loaded = load_config(env={}, user_file=None)

    assert loaded.path == (project / "ouroboros.toml").resolve()
    assert loaded.state_dir == (project / ".ouroboros").resolve()
    assert loaded.workspace == (project / "workspace").resolve()


# -- the commands --


@pytest.mark.parametrize("command", [["status"], ["runs"], ["stats"], ["logs"]])
def test_commands_find_the_run_from_inside_the_workspace(project, monkeypatch, command):
    monkeypatch.chdir(project / "workspace" / "src" / "deep")

    result = invoke(*command)

    assert result.exit_code == 0, result.output
    assert "no runs yet" not in result.output
    assert RUN_ID in result.output or "run_start" in result.output or "run ended" in result.output


def test_status_from_the_workspace_shows_the_run(project, monkeypatch):
    monkeypatch.chdir(project / "workspace")

    result = invoke("status")

    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].split() == ["run", RUN_ID]


def test_no_project_says_where_it_looked_and_how_to_make_one(tmp_path, monkeypatch):
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")

    result = invoke("status")

    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: no ouroboros.toml in {tmp_path / 'elsewhere'} or any directory above it; "
        "run `ouroboros init` to create a project, or pass --config"
    )


def test_an_explicit_config_still_wins(project, tmp_path, monkeypatch):
    other = tmp_path / "other"
    other.mkdir()
    (other / "ouroboros.toml").write_text("")
    monkeypatch.chdir(project / "workspace")

    result = invoke("status", "--config", str(other / "ouroboros.toml"))

    assert result.exit_code == 0
    assert result.output == f"no runs yet in {other / '.ouroboros'}\n"


def test_config_set_from_inside_the_workspace_edits_the_projects_file(project, monkeypatch):
    monkeypatch.chdir(project / "workspace" / "src")
    result = invoke("config", "set", "context.soft_threshold_pct", "0.6")
    assert result.exit_code == 0, result.output
    assert str(project / "ouroboros.toml") in result.output
    assert "soft_threshold_pct = 0.6" in (project / "ouroboros.toml").read_text()
    assert not (project / "workspace" / "src" / "ouroboros.toml").exists()
