"""The read-only commands (`status`, `runs`, `logs`, `stats`, `watch`) with a config they cannot
fully validate: a typo must never hide a run that is going on. They need only the state dir,
say one warning line, and exit 0."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ouroboros.cli import app
from ouroboros.config import ContextConfig
from ouroboros.config.lenient import load_leniently
from tests.ui_sample import RUN_ID, write_sample_run


def invoke(*args: str, cwd: Path | None = None) -> object:
    clean: dict[str, str | None] = {
        name: None for name in os.environ if name.startswith("OUROBOROS_") or name == "OLLAMA_HOST"
    }
    clean.update(COLUMNS="100", XDG_CONFIG_HOME="/nonexistent-ouroboros-test")
    return CliRunner(env=clean).invoke(app, list(args))


def typo_project(tmp_path: Path, body: str) -> Path:
    config = tmp_path / "ouroboros.toml"
    config.write_text(body)
    write_sample_run(tmp_path / "state", ended=True)
    return config


TYPO = '[logging]\nstate_dir = "state"\n[context]\nsof_threshold_pct = 0.6\n'


@pytest.mark.parametrize("command", ["status", "runs", "logs", "stats", "watch"])
def test_a_typo_in_the_config_is_one_warning_and_the_run_is_still_shown(tmp_path, command):
    config = typo_project(tmp_path, TYPO)

    result = invoke(command, "-c", str(config))

    assert result.exit_code == 0, result.output
    warnings = result.stderr.splitlines()
    assert len(warnings) == 1
    assert warnings[0].startswith("warning: unknown key context.sof_threshold_pct in ")
    assert f"`ouroboros {command}` reads the runs anyway" in warnings[0]
    assert RUN_ID in result.stdout or "max_turns" in result.stdout


def test_the_values_that_hold_are_still_used(tmp_path):
    config = typo_project(
        tmp_path,
        TYPO.replace(
            "[context]\n", "[context]\nsoft_threshold_pct = 0.55\nhard_threshold_pct = 1.5\n"
        ),
    )

    loaded = load_leniently(config, env={}, user_file=None)

    assert loaded.state_dir == tmp_path / "state"
    assert loaded.config.context.soft_threshold_pct == 0.55
    assert loaded.config.context.hard_threshold_pct == ContextConfig().hard_threshold_pct
    assert loaded.sources["context.soft_threshold_pct"].startswith("project file")


@pytest.mark.parametrize(
    "body",
    [
        '[logging]\nstate_dir = "state"\n[context]\nsoft_threshold_pct = "high"\n',
        '[logging]\nstate_dir = "state"\n[contxt]\nsoft_threshold_pct = 0.6\n',
        '[logging]\nstate_dir = "state"\n[context]\nsoft_threshold_pct = 0.95\n'
        "hard_threshold_pct = 0.9\n",
    ],
)
def test_a_bad_value_or_table_leaves_only_that_at_its_default(tmp_path, body):
    config = typo_project(tmp_path, body)

    result = invoke("status", "-c", str(config))

    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("warning: ") and result.stderr.count("\n") == 1
    assert RUN_ID in result.stdout


def test_a_file_that_is_not_toml_still_finds_the_runs_in_the_default_state_dir(tmp_path):
    config = tmp_path / "ouroboros.toml"
    config.write_text("[context\n")
    write_sample_run(tmp_path / ".ouroboros", ended=True)

    result = invoke("runs", "-c", str(config))

    assert result.exit_code == 0, result.output
    assert "is not valid TOML" in result.stderr
    assert RUN_ID in result.stdout


def test_a_run_still_refuses_the_typo(tmp_path):
    config = typo_project(tmp_path, TYPO)

    result = invoke("run", "-c", str(config), "--headless")

    assert result.exit_code == 2
    assert result.stderr.startswith("error: unknown key context.sof_threshold_pct")


def test_without_a_project_there_is_still_nothing_to_read(tmp_path):
    result = invoke("status", "-c", str(tmp_path / "missing.toml"))

    assert result.exit_code == 2
    assert "config file not found" in result.stderr


# -- logs -n N --


def sample(tmp_path: Path) -> Path:
    config = tmp_path / "ouroboros.toml"
    config.write_text("")
    write_sample_run(tmp_path / ".ouroboros", ended=True)
    return config


def test_logs_n_shows_the_last_n_events_as_the_full_listing_ends(tmp_path):
    config = sample(tmp_path)
    everything = invoke("logs", "-c", str(config)).stdout.splitlines()

    short = invoke("logs", "-n", "3", "-c", str(config))
    long = invoke("logs", "--tail", "3", "--type", "context_mask", "-c", str(config))

    assert short.exit_code == 0, short.output
    assert short.stdout.splitlines() == everything[-3:]
    assert [line for line in everything if " masked " in line][-3:] == long.stdout.splitlines()
    assert invoke("logs", "-n", "0", "-c", str(config)).stdout == ""


def test_logs_n_refuses_a_negative_count(tmp_path):
    result = invoke("logs", "-n", "-2", "-c", str(sample(tmp_path)))

    assert result.exit_code == 2
    assert result.stderr == "error: -n/--tail must be 0 or more events, got -2\n"


def test_logs_follow_with_n_starts_that_far_back(tmp_path):
    config = sample(tmp_path)
    everything = invoke("logs", "-c", str(config)).stdout.splitlines()

    result = invoke("logs", "-f", "-n", "2", "-c", str(config))

    assert result.stdout.splitlines() == everything[-2:]


@pytest.mark.parametrize(
    "command", [["status"], ["status", "--json"], ["runs"], ["stats"], ["watch"]]
)
def test_output_that_cannot_be_written_is_one_line_not_a_traceback(tmp_path, command):
    import subprocess
    import sys

    config = sample(tmp_path)
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "ouroboros", *command, "-c", str(config)],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
        )

    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == ["error: No space left on device"]


# -- config show and tell, which need no valid config either --


def test_config_show_of_a_config_with_a_typo_shows_what_holds_and_names_the_problem(tmp_path):
    config = typo_project(
        tmp_path,
        TYPO.replace("[context]\n", '[model]\nname = "mine"\ntemperature = "hot"\n[context]\n'),
    )

    result = invoke("config", "show", "-c", str(config))

    assert result.exit_code == 0, result.output
    [warning] = result.stderr.splitlines()
    assert warning.startswith("warning: unknown key context.sof_threshold_pct in ")
    assert "(did you mean context.soft_threshold_pct?)" in warning
    assert "Traceback" not in result.output
    assert '"mine"' in result.stdout and '"state"' in result.stdout


def test_tell_with_a_typo_in_the_config_leaves_the_message_for_the_agent(tmp_path):
    from ouroboros.loop.inbox import waiting

    config = typo_project(tmp_path, TYPO)

    result = invoke("tell", "-c", str(config), "Carry on with part 2.")

    assert result.exit_code == 0, result.output
    [warning] = result.stderr.splitlines()
    assert "`ouroboros tell` delivers the message anyway" in warning
    assert [letter.text for letter in waiting(tmp_path / "state")] == ["Carry on with part 2."]


def test_config_show_without_the_file_named_is_still_one_error(tmp_path):
    result = invoke("config", "show", "-c", str(tmp_path / "missing.toml"))

    assert result.exit_code == 2
    assert result.stderr.startswith("error: config file not found")
    assert result.stderr.count("\n") == 1
