"""`config set` and the template `init` writes: one key changed, every other byte kept."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from ouroboros.config import (
    DEFAULT_BLOCKED_PATTERNS,
    KEYS,
    Config,
    edit_toml,
    load_config,
    render_template,
    set_config_value,
)
from ouroboros.errors import ConfigError
from tests.config.files import write

# --- config set ----------------------------------------------------------------------------


ORIGINAL = '# my settings\n[model]\nname = "qwen3"\n\n[context]\nhard_threshold_pct = 0.85\n'


@pytest.fixture
def editable(tmp_path: Path) -> Path:
    return write(tmp_path / "edit" / "ouroboros.toml", ORIGINAL)


def test_set_value_keeps_other_keys(editable: Path) -> None:
    assert (
        set_config_value(editable, "context.soft_threshold_pct", "0.6", env={}, user_file=None)
        == 0.6
    )
    assert editable.read_text() == ORIGINAL + "soft_threshold_pct = 0.6\n"  # comment kept
    loaded = load_config(editable, env={}, user_file=None)
    assert loaded.config.context.soft_threshold_pct == 0.6
    assert not list(editable.parent.glob("*.tmp"))


@pytest.mark.parametrize(
    ("key", "raw", "value"),
    [
        ("context.auto_restart", "false", False),
        ("agent.max_turns", "12", 12),
        ("safety.blocked_patterns", '[ "a", "b" ]', ["a", "b"]),
        ("model.name", "llama3.1:8b", "llama3.1:8b"),
        ("model.name", '"quoted"', "quoted"),
        ("model.name", "3.2", "3.2"),
        ("agent.workspace", "2024-01-01", "2024-01-01"),
        ("model.api_key_env", "", ""),
    ],
)
def test_set_value_parsing(editable: Path, key: str, raw: str, value: object) -> None:
    assert set_config_value(editable, key, raw, env={}, user_file=None) == value
    table, name = key.split(".")
    assert tomllib.loads(editable.read_text())[table][name] == value


def test_set_value_adds_a_missing_table(editable: Path) -> None:
    set_config_value(editable, "logging.state_dir", "state", env={}, user_file=None)
    assert tomllib.loads(editable.read_text())["logging"] == {"state_dir": "state"}


@pytest.mark.parametrize(
    ("key", "raw", "expected"),
    [
        ("model.nmae", "x", "unknown key model.nmae (did you mean model.name?)"),
        ("model.temperature", "hot", 'model.temperature in {f} must be a number, got "hot"'),
        (
            "context.soft_threshold_pct",
            "1.5",
            "context.soft_threshold_pct in {f} must be greater than 0 and less than 1, got 1.5",
        ),
        (
            "context.soft_threshold_pct",
            "0.9",
            "context.soft_threshold_pct (0.9 in {f}) must be less than context.hard_threshold_pct (0.85 in {f})",
        ),
        (
            "safety.blocked_patterns",
            "['(']",
            'safety.blocked_patterns in {f} has a pattern that is not a valid Python regex: "("',
        ),
        (
            "context.tool_result_truncation",
            "middle",
            'context.tool_result_truncation in {f} must be one of "head", "tail" or "both", got "middle"',
        ),
    ],
)
def test_set_value_failure_leaves_the_file_untouched(
    editable: Path, key: str, raw: str, expected: str
) -> None:
    before = editable.read_bytes()
    with pytest.raises(ConfigError) as caught:
        set_config_value(editable, key, raw, env={}, user_file=None)
    assert caught.value.message.startswith(expected.format(f=editable))
    assert "\n" not in caught.value.message
    assert editable.read_bytes() == before
    assert [p.name for p in editable.parent.iterdir()] == ["ouroboros.toml"]


def test_set_value_checks_the_file_value_even_when_the_environment_overrides_it(
    editable: Path,
) -> None:
    before = editable.read_bytes()
    env = {"OUROBOROS_MODEL_TEMPERATURE": "0.5"}
    with pytest.raises(ConfigError, match="model.temperature in .* must be between 0 and 2, got 9"):
        set_config_value(editable, "model.temperature", "9", env=env, user_file=None)
    assert editable.read_bytes() == before


def test_set_value_in_a_broken_file_leaves_it_untouched(editable: Path) -> None:
    write(editable, "[model\nname = 1\n")
    before = editable.read_bytes()
    with pytest.raises(ConfigError, match=re.escape(f"{editable} is not valid TOML")):
        set_config_value(editable, "model.name", "x", env={}, user_file=None)
    assert editable.read_bytes() == before


def test_set_value_needs_an_existing_file(tmp_path: Path) -> None:
    missing = tmp_path / "ouroboros.toml"
    with pytest.raises(ConfigError) as caught:
        set_config_value(missing, "model.name", "x", env={}, user_file=None)
    assert caught.value.message == (
        f"config file not found: {missing} "
        f"(create it with `ouroboros init --missing --config {missing}`)"
    )
    assert not missing.exists()


# --- the template --------------------------------------------------------------------------


def uncommented(text: str) -> str:
    """The template with every commented-out key uncommented (the descriptions left alone)."""
    names = "|".join(key.split(".")[1] for key in KEYS)
    text = re.sub(rf"^# ((?:{names}) = )", r"\1", text, flags=re.MULTILINE)
    return re.sub(r"^# (    .*,|\])$", r"\1", text, flags=re.MULTILINE)


def test_template_leaves_every_key_to_the_lower_layers(tmp_path: Path, user: Path) -> None:
    path = write(tmp_path / "ouroboros.toml", render_template())
    loaded = load_config(path, env={}, user_file=None)
    assert loaded.config == Config()
    assert set(loaded.sources.values()) == {"default"}
    layered = load_config(path, env={}, user_file=user)
    assert layered.config.model.name == "from-user"
    assert layered.sources["model.name"] == f"user file {user}"


def test_template_commented_defaults_are_the_defaults(tmp_path: Path) -> None:
    text = uncommented(render_template())
    path = write(tmp_path / "ouroboros.toml", text)
    loaded = load_config(path, env={}, user_file=None)
    assert loaded.config == Config()
    assert set(loaded.sources.values()) == {f"project file {path}"}
    assert "    '''\\brm\\s+" in text  # regexes as TOML literal strings


def test_template_has_every_table_key_and_description() -> None:
    text = render_template()
    flat = " ".join(line.removeprefix("# ") for line in text.splitlines() if line.startswith("#"))
    for table, info in Config.model_fields.items():
        assert f"\n[{table}]\n" in text
        for name, field in info.annotation.model_fields.items():  # type: ignore[union-attr]
            assert re.search(rf"^# {name} = ", text, re.MULTILINE), name
            assert " ".join(field.description.split()) in flat, name
    assert len(re.findall(r"^# \w+ = ", text, re.MULTILINE)) == len(KEYS)
    assert not re.search(r"^\w+ =", text, re.MULTILINE)  # no key is set


# --- editing in place ----------------------------------------------------------------------


def changed_block(before: str, after: str) -> tuple[list[str], list[str]]:
    """The lines of `before` that `after` replaced, and what replaced them (one block)."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    return old[head : len(old) - tail], new[head : len(new) - tail]


TEMPLATE_LINES = render_template().splitlines(keepends=True)
# the commented-out default array, from its first line to its closing bracket
PATTERN_LINES = TEMPLATE_LINES[
    TEMPLATE_LINES.index("# blocked_patterns = [\n") : TEMPLATE_LINES.index("# ]\n") + 1
]
assert len(PATTERN_LINES) == len(DEFAULT_BLOCKED_PATTERNS) + 2


@pytest.mark.parametrize(
    ("key", "value", "removed", "added"),
    [
        ("model.temperature", 0.2, ["# temperature = 0.7\n"], ["temperature = 0.2\n"]),
        ("agent.max_turns", 12, ["# max_turns = 0\n"], ["max_turns = 12\n"]),
        ("context.auto_restart", False, ["# auto_restart = true\n"], ["auto_restart = false\n"]),
        ("model.name", "-1", ['# name = "llama3.2"\n'], ['name = "-1"\n']),
        ("logging.state_dir", "st", ['# state_dir = ".ouroboros"\n'], ['state_dir = "st"\n']),
        (
            "safety.blocked_patterns",
            [r"\bsudo\b"],
            PATTERN_LINES,
            ["blocked_patterns = [\n", "    '\\bsudo\\b',\n", "]\n"],
        ),
    ],
)
def test_edit_uncomments_the_default_where_it_is(
    key: str, value: object, removed: list[str], added: list[str]
) -> None:
    before = render_template()
    after = edit_toml(before, key, value)
    assert changed_block(before, after) == (removed, added)
    table, name = key.split(".")
    assert tomllib.loads(after) == {**tomllib.loads(before), table: {name: value}}
    assert edit_toml(after, key, value) == after  # set again: the same line, in place


def test_edit_replaces_a_set_key_and_keeps_its_comment() -> None:
    text = '# mine\n[model]\nname = "qwen3"  # the big one\n\n[context]\n'
    assert edit_toml(text, "model.name", "llama3.1") == (
        '# mine\n[model]\nname = "llama3.1"  # the big one\n\n[context]\n'
    )


def test_edit_adds_a_key_after_the_last_one_of_its_table() -> None:
    text = "[model]\nname = 'a'\n\n# Where runs are recorded.\n[logging]\n"
    assert edit_toml(text, "model.temperature", 0.5) == (
        "[model]\nname = 'a'\ntemperature = 0.5\n\n# Where runs are recorded.\n[logging]\n"
    )


def test_edit_adds_a_missing_table_at_the_end() -> None:
    assert edit_toml("# mine\n[model]\nname = 'a'", "logging.state_dir", "s") == (
        "# mine\n[model]\nname = 'a'\n\n[logging]\nstate_dir = \"s\"\n"
    )
    assert edit_toml("", "logging.state_dir", "s") == '[logging]\nstate_dir = "s"\n'


def test_edit_keeps_windows_line_endings() -> None:
    text = "[model]\r\n# temperature = 0.7\r\n\r\n[agent]\r\n"
    assert edit_toml(text, "model.temperature", 1.5) == (
        "[model]\r\ntemperature = 1.5\r\n\r\n[agent]\r\n"
    )


def test_edit_sets_a_dotted_key_beside_its_siblings() -> None:
    assert edit_toml("model.name = 'x'\n", "model.temperature", 1.0) == (
        "model.name = 'x'\nmodel.temperature = 1.0\n"
    )
