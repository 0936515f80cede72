"""`ouroboros config get KEY`, `config unset KEY` and `config show KEY`, as git's config does
them, and usage errors that point at the `--help` of the command they happened in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ouroboros.cli import app
from tests.helpers import clean_env, ouroboros


def invoke(tmp_path: Path, *args: str, **env: str) -> object:
    clean: dict[str, str | None] = {
        name: None for name in os.environ if name.startswith("OUROBOROS_") or name == "OLLAMA_HOST"
    }
    clean.update(COLUMNS="200", XDG_CONFIG_HOME=str(tmp_path / "no-user-config"), **env)
    return CliRunner(env=clean).invoke(app, list(args))


def project(tmp_path: Path) -> Path:
    result = invoke(tmp_path, "init", str(tmp_path / "agent"))
    assert result.exit_code == 0, result.output
    return tmp_path / "agent" / "ouroboros.toml"


def test_get_prints_the_effective_value_alone_for_scripts(tmp_path):
    config = project(tmp_path)
    invoke(tmp_path, "config", "set", "context.soft_threshold_pct", "0.6", "-c", str(config))

    soft = invoke(tmp_path, "config", "get", "context.soft_threshold_pct", "-c", str(config))
    name = invoke(
        tmp_path, "config", "get", "model.name", "-c", str(config), OUROBOROS_MODEL_NAME="qwen3:8b"
    )

    assert (soft.exit_code, soft.stdout) == (0, "0.6\n")
    assert (name.exit_code, name.stdout) == (0, "qwen3:8b\n")


def test_get_of_an_unknown_key_names_the_nearest(tmp_path):
    result = invoke(tmp_path, "config", "get", "model.nam", "-c", str(project(tmp_path)))

    assert result.exit_code == 2
    assert result.stderr == "error: unknown key model.nam (did you mean model.name?)\n"


@pytest.mark.parametrize(
    "key,value",
    [
        ("model.temperature", "0.25"),
        ("model.name", "qwen3:8b"),
        ("safety.blocked_patterns", '["rm -rf /"]'),
    ],
)
def test_unset_after_set_gives_back_the_file_init_wrote(tmp_path, key, value):
    config = project(tmp_path)
    before = config.read_text()
    invoke(tmp_path, "config", "set", key, value, "-c", str(config))
    assert config.read_text() != before

    result = invoke(tmp_path, "config", "unset", key, "-c", str(config))

    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"{key} unset in ")
    assert result.stdout.rstrip().endswith("by default")
    assert config.read_text() == before


def test_unset_of_a_key_the_file_does_not_set_changes_nothing(tmp_path):
    config = project(tmp_path)
    before = config.read_text()

    result = invoke(tmp_path, "config", "unset", "model.temperature", "-c", str(config))

    assert result.exit_code == 0
    assert "model.temperature is not set in " in result.stdout
    assert result.stdout.endswith("; it is 0.7 by default\n")
    assert config.read_text() == before


def test_unset_keeps_the_rest_of_a_hand_written_file(tmp_path):
    config = tmp_path / "ouroboros.toml"
    config.write_text("# mine\n[model]\ntemperature = 0.1  # cool\nname = 'x'\n")

    result = invoke(tmp_path, "config", "unset", "model.name", "-c", str(config))

    assert result.exit_code == 0, result.output
    assert config.read_text() == (
        '# mine\n[model]\ntemperature = 0.1  # cool\n# name = "llama3.2"\n'
    )


def test_unset_that_would_leave_a_bad_config_is_refused_and_changes_nothing(tmp_path):
    config = tmp_path / "ouroboros.toml"
    text = "[context]\nsoft_threshold_pct = 0.95\nhard_threshold_pct = 0.97\n"
    config.write_text(text)

    result = invoke(tmp_path, "config", "unset", "context.hard_threshold_pct", "-c", str(config))

    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert config.read_text() == text


def test_show_with_keys_shows_only_their_rows(tmp_path):
    config = project(tmp_path)

    result = invoke(
        tmp_path, "config", "show", "model.name", "context.soft_threshold_pct", "-c", str(config)
    )

    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if "." in line and "│" in line]
    assert [row.split("│")[2].strip() for row in rows] == [
        "model.name",
        "context.soft_threshold_pct",
    ]
    bad = invoke(tmp_path, "config", "show", "model.nme", "-c", str(config))
    assert bad.exit_code == 2 and "did you mean model.name?" in bad.stderr


@pytest.mark.parametrize(
    "args,help_command",
    [
        (["config", "gett"], "ouroboros config --help"),
        (["config", "set", "model.name"], "ouroboros config set --help"),
        (["logs", "--bogus"], "ouroboros logs --help"),
        (["bogus"], "ouroboros --help"),
    ],
)
def test_a_usage_error_points_at_the_help_of_its_own_command(args, help_command):
    result = ouroboros(*args, env=clean_env())

    assert result.returncode == 2
    assert result.stderr.startswith("error: ")
    assert result.stderr.endswith(f"(see `{help_command}`)\n")
    assert result.stderr.count("\n") == 1
