"""Errors suggest fixes that work: a project missing its system prompt or workspace is told
`ouroboros init --missing`, and that command adds only what is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import clean_env, make_project, ouroboros_here


def broken_project(tmp_path: Path, remove: str, **agent: str) -> Path:
    config = make_project(tmp_path / "p", "http://127.0.0.1:9", agent=agent)
    target = tmp_path / "p" / remove
    target.rmdir() if target.is_dir() else target.unlink()
    return config


@pytest.mark.parametrize(
    "remove,what",
    [("SYSTEM_PROMPT.md", "system prompt file"), ("workspace", "workspace directory")],
)
def test_the_fix_a_missing_file_suggests_is_one_that_works(tmp_path, remove, what):
    config = broken_project(tmp_path, remove)
    kept = config.read_text()

    refused = ouroboros_here("run", "--headless", cwd=config.parent)
    fixed = ouroboros_here("init", "--missing", cwd=config.parent)
    again = ouroboros_here("init", "--missing", cwd=config.parent)

    assert refused.returncode == 2
    assert f"{what} not found: {config.parent / remove}" in refused.stderr
    assert "create it with `ouroboros init --missing`" in refused.stderr
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout.startswith(f"created {config.parent / remove}")
    assert fixed.stdout.count("created") == 1
    assert (config.parent / remove).exists() and config.read_text() == kept
    assert again.returncode == 0 and again.stdout.startswith("nothing is missing")


def test_from_elsewhere_the_suggestion_names_the_config(tmp_path):
    config = broken_project(tmp_path, "SYSTEM_PROMPT.md", workspace="ws", system_prompt="m/x.md")

    refused = ouroboros_here("run", "--config", str(config), "--headless", cwd=tmp_path)
    command = f"ouroboros init --missing --config {config}"
    fixed = ouroboros_here(*command.split()[1:], cwd=tmp_path)

    assert f"create it with `{command}`" in refused.stderr
    assert fixed.returncode == 0, fixed.stderr
    assert (config.parent / "m" / "x.md").read_text().strip()
    assert (config.parent / "ws").is_dir()


def test_a_missing_config_file_suggests_init_missing_with_that_file(tmp_path):
    config = tmp_path / "elsewhere" / "agent.toml"

    refused = ouroboros_here("run", "--config", str(config), "--headless", cwd=tmp_path)
    fixed = ouroboros_here("init", "--missing", "--config", str(config), cwd=tmp_path)

    assert refused.returncode == 2
    assert f"(create it with `ouroboros init --missing --config {config}`)" in refused.stderr
    assert fixed.returncode == 0, fixed.stderr
    assert sorted(p.name for p in config.parent.iterdir()) == [
        "SYSTEM_PROMPT.md",
        "agent.toml",
        "workspace",
    ]


def test_init_missing_refuses_a_path_of_the_wrong_kind(tmp_path):
    config = broken_project(tmp_path, "workspace")
    (config.parent / "workspace").write_text("a file")

    result = ouroboros_here("init", "--missing", cwd=config.parent, env=clean_env())

    assert result.returncode == 2
    assert result.stderr.startswith("error: workspace is not a directory: ")


def test_init_in_an_existing_project_points_at_init_missing_and_that_works(tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    (project / "ouroboros.toml").write_text("# mine\n")

    refused = ouroboros_here("init", cwd=project)
    suggested = refused.stderr.split("`")[1]
    fixed = ouroboros_here(*suggested.split()[1:], cwd=project)

    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert suggested == "ouroboros init --missing"
    assert fixed.returncode == 0, fixed.stderr
    assert (project / "SYSTEM_PROMPT.md").is_file() and (project / "workspace").is_dir()
    assert (project / "ouroboros.toml").read_text() == "# mine\n"
