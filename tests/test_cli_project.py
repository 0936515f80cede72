"""`ouroboros init` and `ouroboros config show|set`, through the real command on real files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ouroboros.cli import app
from ouroboros.config import load_config, render_template

REPO = Path(__file__).resolve().parents[1]


def runner(tmp_path: Path, **env: str) -> CliRunner:
    """A runner whose environment has none of the user's Ouroboros settings."""
    clean: dict[str, str | None] = {name: None for name in os.environ
                                    if name.startswith("OUROBOROS_") or name == "OLLAMA_HOST"}
    clean.update(COLUMNS="200", XDG_CONFIG_HOME=str(tmp_path / "no-user-config"), **env)
    return CliRunner(env=clean)


def row(output: str, key: str) -> str:
    return next(line for line in output.splitlines() if f" {key} " in line)


# -- init --


def test_init_creates_a_project(tmp_path):
    project = tmp_path / "agent"

    result = runner(tmp_path).invoke(app, ["init", str(project)])

    assert result.exit_code == 0, result.output
    assert (project / "ouroboros.toml").read_text() == render_template()
    assert (project / "SYSTEM_PROMPT.md").read_text() == (REPO / "SYSTEM_PROMPT.md").read_text()
    assert (project / "workspace").is_dir()
    for name in ("ouroboros.toml", "SYSTEM_PROMPT.md", "workspace/"):
        assert f"created {project / name.rstrip('/')}" in result.output
    assert f"cd {project} && ouroboros run" in result.output
    assert "ouroboros demo" in result.output
    loaded = load_config(project / "ouroboros.toml", env={}, user_file=None)
    loaded.check_files()  # ready to run as it is


def test_init_in_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    result = runner(tmp_path).invoke(app, ["init"])

    assert result.exit_code == 0, result.output
    assert (tmp_path / "ouroboros.toml").is_file()
    assert "\n  ouroboros run\n" in result.output


@pytest.mark.parametrize("existing", ["ouroboros.toml", "SYSTEM_PROMPT.md"])
def test_init_refuses_to_overwrite(tmp_path, existing):
    (tmp_path / existing).write_text("mine\n")

    result = runner(tmp_path).invoke(app, ["init", str(tmp_path)])

    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: {tmp_path / existing} already exists; "
                                     "not overwriting it (nothing was changed)")
    assert sorted(p.name for p in tmp_path.iterdir()) == [existing]
    assert (tmp_path / existing).read_text() == "mine\n"


# -- config show --


def test_config_show_names_every_source(tmp_path):
    config = tmp_path / "ouroboros.toml"
    config.write_text('[model]\nname = "qwen3:8b"\n')

    result = runner(tmp_path, OUROBOROS_CONTEXT_CARRYOVER_TURNS="9").invoke(
        app, ["config", "show", "--config", str(config)])

    assert result.exit_code == 0, result.output
    assert f"project file: {config}" in result.output
    assert '"qwen3:8b"' in row(result.output, "model.name")
    assert "project file" in row(result.output, "model.name")
    carryover = row(result.output, "context.carryover_turns")
    assert " 9 " in carryover and "env OUROBOROS_CONTEXT_CARRYOVER_TURNS" in carryover
    assert "0.7" in row(result.output, "context.soft_threshold_pct")
    assert "default" in row(result.output, "context.soft_threshold_pct")
    assert r"'\bmkfs(?:\.\w+)?\b'" in result.output  # regexes as TOML literal strings
    assert result.output.count("default") >= 20


def test_config_show_reports_a_bad_file(tmp_path):
    config = tmp_path / "ouroboros.toml"
    config.write_text("[context]\nsoft_threshold_pct = 1.5\n")

    result = runner(tmp_path).invoke(app, ["config", "show", "-c", str(config)])

    assert result.exit_code == 2
    assert result.stderr.startswith("error: context.soft_threshold_pct in ")


# -- config set --


def test_config_set_writes_the_value(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ouroboros.toml").write_text(render_template())

    result = runner(tmp_path).invoke(app, ["config", "set", "context.soft_threshold_pct", "0.6"])

    assert result.exit_code == 0, result.output
    assert result.output == "context.soft_threshold_pct = 0.6 (in ouroboros.toml)\n"
    loaded = load_config(tmp_path / "ouroboros.toml", env={}, user_file=None)
    assert loaded.config.context.soft_threshold_pct == 0.6


def test_config_set_says_when_the_environment_still_wins(tmp_path):
    config = tmp_path / "ouroboros.toml"
    config.write_text("")

    result = runner(tmp_path, OUROBOROS_MODEL_NAME="llama3.1").invoke(
        app, ["config", "set", "model.name", "qwen3:8b", "--config", str(config)])

    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f'model.name = "qwen3:8b" (in {config})',
        'note: environment OUROBOROS_MODEL_NAME still overrides it (effective value: '
        '"llama3.1")',
    ]


@pytest.mark.parametrize("key,value,message", [
    ("context.soft_threshold_pct", "2",
     "error: context.soft_threshold_pct in {config} must be greater than 0 and less than 1, "
     "got 2"),
    ("context.soft_threshold", "0.5",
     "error: unknown key context.soft_threshold (did you mean context.soft_threshold_pct?)"),
    ("context.hard_threshold_pct", "0.5",
     "error: context.soft_threshold_pct (0.7 by default) must be less than "
     "context.hard_threshold_pct (0.5 in {config})"),
])
def test_config_set_refuses_a_bad_value_and_leaves_the_file_alone(tmp_path, key, value,
                                                                  message):
    config = tmp_path / "ouroboros.toml"
    config.write_text("# my settings\n[model]\nname = 'qwen3:8b'\n")
    before = config.read_bytes()

    result = runner(tmp_path).invoke(app, ["config", "set", key, value, "-c", str(config)])

    assert result.exit_code == 2
    assert result.stderr.strip() == message.format(config=config)
    assert config.read_bytes() == before


def test_config_set_needs_a_file(tmp_path):
    result = runner(tmp_path).invoke(
        app, ["config", "set", "model.name", "x", "-c", str(tmp_path / "missing.toml")])

    assert result.exit_code == 2
    assert "config file not found" in result.stderr and "ouroboros init" in result.stderr
