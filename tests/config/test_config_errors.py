"""Every config problem is one line naming the key, where its value came from and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.files import config_error, write


def test_toml_syntax_error_names_file_and_line(project: Path) -> None:
    write(project, '[model]\nname = "x"\ntemperature = \n')
    message = config_error(path=project)
    assert message.startswith(f"{project} is not valid TOML: ")
    assert "line 3" in message


def test_unknown_key_suggests_the_close_match(project: Path) -> None:
    write(project, '[model]\nnmae = "x"\n')
    assert config_error(path=project) == (
        f"unknown key model.nmae in {project} (did you mean model.name?)"
    )


def test_unknown_key_without_a_match_lists_the_table(project: Path) -> None:
    write(project, "[logging]\nwhatever_else_entirely = 3\n")
    assert config_error(path=project) == (
        f"unknown key logging.whatever_else_entirely in {project} ([logging] takes state_dir, durability, segment_mb, keep_mb, keep_sessions, keep_days)"
    )


def test_durability_takes_turn_or_event(project: Path) -> None:
    write(project, '[logging]\ndurability = "sometimes"\n')
    error = config_error(path=project)
    assert "logging.durability" in error and "turn" in error and "event" in error
    assert "\n" not in error


def test_unknown_table_suggests_the_close_match(project: Path) -> None:
    write(project, '[modle]\nname = "x"\n')
    assert (
        config_error(path=project) == f"unknown table [modle] in {project} (did you mean [model]?)"
    )


def test_key_outside_a_table(project: Path) -> None:
    write(project, 'name = "x"\n')
    message = config_error(path=project)
    assert (
        message
        == f"key name in {project} is outside any table (did you mean model.name, under [model]?)"
    )


def test_wrong_type(project: Path) -> None:
    write(project, '[model]\ntemperature = "hot"\n')
    assert (
        config_error(path=project) == f'model.temperature in {project} must be a number, got "hot"'
    )


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            '[context]\nauto_restart = "yes"',
            'context.auto_restart in {f} must be true or false, got "yes"',
        ),
        ("[agent]\nmax_turns = 2.5", "agent.max_turns in {f} must be a whole number, got 2.5"),
        (
            '[safety]\nblocked_patterns = "rm"',
            'safety.blocked_patterns in {f} must be a list of strings, got "rm"',
        ),
        (
            '[context]\ntool_result_truncation = "middle"',
            'context.tool_result_truncation in {f} must be one of "head", "tail" or "both", got "middle"',
        ),
        ('[model]\nname = ""', "model.name in {f} must not be empty"),
        (
            '[model]\nbase_url = "localhost:11434"',
            "model.base_url in {f} must be an http:// "
            "or https:// URL with a host and a port from 1 to 65535, "
            'like http://127.0.0.1:11434, got "localhost:11434"',
        ),
    ],
)
def test_other_wrong_values(project: Path, line: str, expected: str) -> None:
    write(project, line + "\n")
    assert config_error(path=project) == expected.format(f=project)


def test_api_key_pasted_in_place_of_a_variable_name_is_not_echoed(project: Path) -> None:
    write(project, '[model]\napi_key_env = "sk-secret-123"\n')
    message = config_error(path=project)
    assert message.startswith(
        f"model.api_key_env in {project} must be the name of an environment variable"
    )
    assert "sk-secret" not in message


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "[context]\nsoft_threshold_pct = 1.5",
            "context.soft_threshold_pct in {f} must be greater than 0 and less than 1, got 1.5",
        ),
        ("[model]\ntemperature = 3", "model.temperature in {f} must be between 0 and 2, got 3"),
        (
            "[safety]\nmax_output_bytes = 100",
            "safety.max_output_bytes in {f} must be at least 1024, got 100",
        ),
        (
            "[model]\nrequest_timeout_secs = 0",
            "model.request_timeout_secs in {f} must be greater than 0, got 0",
        ),
        (
            "[context]\nmax_tool_result_tokens = 10",
            "context.max_tool_result_tokens in {f} must be at least 100, got 10",
        ),
        (
            "[model]\nmax_retry_secs = nan",
            "model.max_retry_secs in {f} must be a finite number, got nan",
        ),
    ],
)
def test_out_of_range(project: Path, line: str, expected: str) -> None:
    write(project, line + "\n")
    assert config_error(path=project) == expected.format(f=project)


def test_out_of_range_is_blamed_on_the_layer_that_set_it(project: Path, user: Path) -> None:
    write(user, "[context]\nmask_batch_size = 0\n")
    message = config_error(path=project, user_file=user)
    assert message == f"context.mask_batch_size in {user} must be at least 1, got 0"


def test_soft_threshold_must_be_below_hard(project: Path) -> None:
    write(project, "[context]\nsoft_threshold_pct = 0.95\n")
    assert config_error(path=project) == (
        f"context.soft_threshold_pct (0.95 in {project}) must be less than "
        "context.hard_threshold_pct (0.9 by default)"
    )


def test_soft_threshold_order_across_layers(project: Path) -> None:
    write(project, "[context]\nsoft_threshold_pct = 0.8\n")
    message = config_error(path=project, env={"OUROBOROS_CONTEXT_HARD_THRESHOLD_PCT": "0.75"})
    assert message == (
        f"context.soft_threshold_pct (0.8 in {project}) must be less than context.hard_threshold_pct "
        "(0.75 from environment variable OUROBOROS_CONTEXT_HARD_THRESHOLD_PCT)"
    )


def test_the_low_water_mark_must_be_below_the_soft_threshold(project: Path) -> None:
    write(project, "[context]\nmask_low_water_pct = 0.75\n")
    assert config_error(path=project) == (
        f"context.mask_low_water_pct (0.75 in {project}) must be less than "
        "context.soft_threshold_pct (0.7 by default)"
    )


def test_bad_regex_names_the_pattern(project: Path) -> None:
    write(project, "[safety]\nblocked_patterns = ['ok', 'rm (-rf']\n")
    message = config_error(path=project)
    assert message.startswith(
        f'safety.blocked_patterns in {project} has a pattern that is not a valid Python regex: "rm (-rf"'
    )
    assert "missing )" in message


def test_env_value_that_does_not_parse() -> None:
    message = config_error(env={"OUROBOROS_MODEL_TEMPERATURE": "hot"})
    assert (
        message
        == 'model.temperature from environment variable OUROBOROS_MODEL_TEMPERATURE must be a number, got "hot"'
    )
    message = config_error(env={"OUROBOROS_CONTEXT_AUTO_RESTART": "perhaps"})
    assert message.startswith(
        "context.auto_restart from environment variable OUROBOROS_CONTEXT_AUTO_RESTART must be true or false"
    )
    message = config_error(env={"OUROBOROS_SAFETY_BLOCKED_PATTERNS": "rm"})
    assert "OUROBOROS_SAFETY_BLOCKED_PATTERNS must be a TOML array of strings" in message


def test_env_value_out_of_range() -> None:
    message = config_error(env={"OUROBOROS_CONTEXT_SOFT_THRESHOLD_PCT": "1.5"})
    assert message == (
        "context.soft_threshold_pct from environment variable OUROBOROS_CONTEXT_SOFT_THRESHOLD_PCT "
        "must be greater than 0 and less than 1, got 1.5"
    )


def test_unknown_environment_variable_in_a_known_table() -> None:
    message = config_error(env={"OUROBOROS_MODEL_NMAE": "x"})
    assert (
        message
        == "unknown environment variable OUROBOROS_MODEL_NMAE (did you mean OUROBOROS_MODEL_NAME?)"
    )


def test_flag_errors_name_the_flag() -> None:
    message = config_error(
        flags={"model.temperature": 5.0}, flag_names={"model.temperature": "--temp"}
    )
    assert message == "model.temperature from flag --temp must be between 0 and 2, got 5"
    message = config_error(flags={"context.max_restarts": -1})
    assert (
        message
        == "context.max_restarts from flag --context-max-restarts must be at least 0, got -1"
    )
    message = config_error(flags={"model.nmae": "x"})
    assert message == "flag --model-nmae sets unknown key model.nmae (did you mean model.name?)"


def test_not_a_table(project: Path) -> None:
    write(project, 'model = "llama"\n')
    assert (
        config_error(path=project) == f'model in {project} must be a table ([model]), got "llama"'
    )


@pytest.mark.parametrize("depth", [40, 3000])
def test_values_nested_too_deeply_are_one_line_and_exit_2(tmp_path: Path, depth: int) -> None:
    from tests.helpers import ouroboros_here

    config = tmp_path / "ouroboros.toml"
    config.write_text("[agent]\nx = " + "[" * depth + "]" * depth + "\n")
    result = ouroboros_here("run", "--config", str(config), "--headless")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: {config} nests arrays or tables too deeply: at most 32 levels are allowed"
    ]
