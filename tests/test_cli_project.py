"""`ouroboros init` and `ouroboros config show|set`, through the real command on real files."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ouroboros.cli import app
from ouroboros.config import DEFAULT_BLOCKED_PATTERNS, KEYS, load_config, render_template
from ouroboros.ui.config_view import toml_value

REPO = Path(__file__).resolve().parents[1]


def runner(tmp_path: Path, **env: str) -> CliRunner:
    """A runner whose environment has none of the user's Ouroboros settings."""
    clean: dict[str, str | None] = {
        name: None for name in os.environ if name.startswith("OUROBOROS_") or name == "OLLAMA_HOST"
    }
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


def test_the_repository_config_is_the_one_init_writes():
    assert (REPO / "ouroboros.toml").read_text() == render_template()


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
    assert result.stderr.strip() == (
        f"error: {tmp_path / existing} already exists; "
        "not overwriting it (nothing was changed); to add only "
        "what the project lacks: "
        f"`ouroboros init {tmp_path} --missing`"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [existing]
    assert (tmp_path / existing).read_text() == "mine\n"


# -- config show --


def test_config_show_names_every_source(tmp_path):
    config = tmp_path / "ouroboros.toml"
    config.write_text('[model]\nname = "qwen3:8b"\n')

    result = runner(tmp_path, OUROBOROS_CONTEXT_CARRYOVER_TURNS="9").invoke(
        app, ["config", "show", "--config", str(config)]
    )

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


def test_config_show_names_a_bad_value_and_shows_the_rest(tmp_path):
    config = tmp_path / "ouroboros.toml"
    config.write_text("[context]\nsoft_threshold_pct = 1.5\n")

    result = runner(tmp_path).invoke(app, ["config", "show", "-c", str(config)])

    assert result.exit_code == 0, result.output
    [warning] = result.stderr.splitlines()
    assert warning.startswith("warning: context.soft_threshold_pct in ")
    assert "0.7" in row(result.stdout, "context.soft_threshold_pct")  # its default, shown


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
        app, ["config", "set", "model.name", "qwen3:8b", "--config", str(config)]
    )

    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f'model.name = "qwen3:8b" (in {config})',
        'note: environment OUROBOROS_MODEL_NAME still overrides it (effective value: "llama3.1")',
    ]


@pytest.mark.parametrize(
    "key,value,message",
    [
        (
            "context.soft_threshold_pct",
            "2",
            "error: context.soft_threshold_pct in {config} must be greater than 0 and less than 1, "
            "got 2",
        ),
        (
            "context.soft_threshold",
            "0.5",
            "error: unknown key context.soft_threshold (did you mean context.soft_threshold_pct?)",
        ),
        (
            "context.hard_threshold_pct",
            "0.5",
            "error: context.soft_threshold_pct (0.7 by default) must be less than "
            "context.hard_threshold_pct (0.5 in {config})",
        ),
    ],
)
def test_config_set_refuses_a_bad_value_and_leaves_the_file_alone(tmp_path, key, value, message):
    config = tmp_path / "ouroboros.toml"
    config.write_text("# my settings\n[model]\nname = 'qwen3:8b'\n")
    before = config.read_bytes()

    result = runner(tmp_path).invoke(app, ["config", "set", key, value, "-c", str(config)])

    assert result.exit_code == 2
    assert result.stderr.strip() == message.format(config=config)
    assert config.read_bytes() == before


def test_config_set_needs_a_file(tmp_path):
    result = runner(tmp_path).invoke(
        app, ["config", "set", "model.name", "x", "-c", str(tmp_path / "missing.toml")]
    )

    assert result.exit_code == 2
    assert "config file not found" in result.stderr and "ouroboros init" in result.stderr


# -- config set and show on the file `init` writes --


def init_project(tmp_path: Path) -> Path:
    result = runner(tmp_path).invoke(app, ["init", str(tmp_path / "agent")])
    assert result.exit_code == 0, result.output
    return tmp_path / "agent" / "ouroboros.toml"


def commented_patterns(text: str) -> str:
    """The commented-out default of safety.blocked_patterns, all its lines, as init writes it."""
    start = text.index("# blocked_patterns = [\n")
    return text[start : text.index("# ]\n", start) + len("# ]\n")]


@pytest.mark.parametrize(
    "key,value,old,new",
    [
        ("model.temperature", "0.25", "# temperature = 0.7\n", "temperature = 0.25\n"),
        ("context.carryover_turns", "8", "# carryover_turns = 5\n", "carryover_turns = 8\n"),
        (
            "context.truncation_guard",
            "false",
            "# truncation_guard = true\n",
            "truncation_guard = false\n",
        ),
        ("model.name", "qwen3:8b", '# name = "llama3.2"\n', 'name = "qwen3:8b"\n'),
        ("model.name", "-1", '# name = "llama3.2"\n', 'name = "-1"\n'),  # a value, not an option
        (
            "safety.blocked_patterns",
            r"['\bsudo\b', 'rm -rf /']",
            None,
            "blocked_patterns = [\n    '\\bsudo\\b',\n    \"rm -rf /\",\n]\n",
        ),
    ],
)
def test_config_set_changes_only_its_line_of_the_file_init_wrote(tmp_path, key, value, old, new):
    config = init_project(tmp_path)
    before = config.read_text()
    old = old or commented_patterns(before)

    result = runner(tmp_path).invoke(app, ["config", "set", key, value, "-c", str(config)])

    assert result.exit_code == 0, result.output
    assert before.count(old) == 1
    assert config.read_bytes() == before.replace(old, new).encode()


def test_config_set_again_changes_the_same_line(tmp_path):
    config = init_project(tmp_path)
    before = config.read_text()

    for value in ("0.3", "1.5"):
        result = runner(tmp_path).invoke(
            app, ["config", "set", "model.temperature", value, "-c", str(config)]
        )
        assert result.exit_code == 0, result.output

    assert config.read_text() == before.replace("# temperature = 0.7\n", "temperature = 1.5\n")


def test_comments_and_regex_literals_survive_edits(tmp_path):
    config = init_project(tmp_path)
    before = config.read_text()
    patterns = r"""['''rm\s+-rf\s+["']?/''', '\bsudo\b']"""
    descriptions = [
        line
        for line in before.splitlines()  # not the commented-out defaults
        if line.startswith("#") and not re.match(r"# (\w+ = |    |\]$)", line)
    ]

    for key, value in [
        ("safety.blocked_patterns", patterns),
        ("model.temperature", "0.3"),
        ("safety.shell_timeout_secs", "12.5"),
    ]:
        result = runner(tmp_path).invoke(app, ["config", "set", key, value, "-c", str(config)])
        assert result.exit_code == 0, result.output

    after = config.read_text()
    assert "blocked_patterns = [\n    '''rm\\s+-rf\\s+[\"']?/''',\n    '\\bsudo\\b',\n]\n" in after
    assert [line for line in after.splitlines() if line in descriptions] == descriptions
    # the 12 lines of the commented-out default array became the 4 of the new one
    assert len(after.splitlines()) == len(before.splitlines()) - 12 + 4
    loaded = load_config(config, env={}, user_file=None)
    assert loaded.config.safety.blocked_patterns == [r"""rm\s+-rf\s+["']?/""", r"\bsudo\b"]


def test_config_set_keeps_a_list_the_user_uncommented_by_hand(tmp_path):
    config = init_project(tmp_path)
    block = commented_patterns(config.read_text())
    mine = config.read_text().replace(
        block, block.replace("# ", "", 1).replace("#     ", "    ").replace("# ]", "]")
    )
    config.write_text(mine)

    result = runner(tmp_path).invoke(
        app, ["config", "set", "context.max_restarts", "4", "-c", str(config)]
    )

    assert result.exit_code == 0, result.output
    assert "\n    '''\\brm\\s+(?:-\\S+\\s+)*" in mine
    assert config.read_text() == mine.replace("# max_restarts = 0\n", "max_restarts = 4\n")


@pytest.mark.parametrize(
    "key,value,message",
    [
        (
            "model.temperature",
            "-1",
            "model.temperature in {config} must be between 0 and 2, got -1",
        ),
        (
            "context.max_restarts",
            "-3",
            "context.max_restarts in {config} must be at least 0, got -3",
        ),
        (
            "context.auto_restart",
            "maybe",
            'context.auto_restart in {config} must be true or false, got "maybe"',
        ),
        (
            "safety.blocked_patterns",
            "['(']",
            "safety.blocked_patterns in {config} has a pattern "
            'that is not a valid Python regex: "(" (missing ), unterminated subpattern '
            "at position 0)",
        ),
        (
            "context.soft_threshold_pct",
            "0.95",
            "context.soft_threshold_pct (0.95 in {config}) must "
            "be less than context.hard_threshold_pct (0.9 by default)",
        ),
    ],
)
def test_config_set_refuses_a_bad_value_in_the_file_init_wrote(tmp_path, key, value, message):
    config = init_project(tmp_path)
    before = config.read_bytes()

    result = runner(tmp_path).invoke(app, ["config", "set", key, value, "-c", str(config)])

    assert result.exit_code == 2
    assert result.stderr == f"error: {message.format(config=config)}\n"
    assert config.read_bytes() == before
    assert sorted(p.name for p in config.parent.iterdir()) == [
        "SYSTEM_PROMPT.md",
        "ouroboros.toml",
        "workspace",
    ]


def changed_marks(output: str) -> list[str]:
    """The keys of the rows `config show` marks with a * (changed from the default)."""
    return [line.split("│")[2].strip() for line in output.splitlines() if line.startswith("│ * │")]


def test_config_show_after_init_says_every_value_is_a_default(tmp_path):
    config = init_project(tmp_path)

    result = runner(tmp_path).invoke(app, ["config", "show", "-c", str(config)])

    assert result.exit_code == 0, result.output
    for key in KEYS:
        assert row(result.output, key).rstrip(" │").endswith("│ default"), key
    assert changed_marks(result.output) == []
    assert "every value is its default" in result.output


def test_config_show_marks_the_key_config_set_changed(tmp_path):
    config = init_project(tmp_path)
    runner(tmp_path).invoke(app, ["config", "set", "model.temperature", "0.25", "-c", str(config)])

    result = runner(tmp_path).invoke(app, ["config", "show", "-c", str(config)])

    assert result.exit_code == 0, result.output
    assert changed_marks(result.output) == ["model.temperature"]
    temperature = row(result.output, "model.temperature")
    assert "0.25  (default 0.7)" in temperature and "project file" in temperature
    assert f"* changed from the default (1 of {len(KEYS)}): model.temperature" in result.output
    assert "every value is its default" not in result.output


def test_the_user_file_takes_effect_in_an_inited_project(tmp_path):
    config = init_project(tmp_path)
    user = tmp_path / "no-user-config" / "ouroboros" / "ouroboros.toml"
    user.parent.mkdir(parents=True)
    user.write_text('[model]\nname = "qwen3:8b"\n')

    result = runner(tmp_path).invoke(app, ["config", "show", "-c", str(config)])

    assert result.exit_code == 0, result.output
    assert f"user file: {user}" in result.output
    name = row(result.output, "model.name")
    assert '"qwen3:8b"  (default "llama3.2")' in name and "user file" in name
    assert changed_marks(result.output) == ["model.name"]


def test_config_show_folds_the_blocked_patterns_unless_asked(tmp_path):
    config = init_project(tmp_path)
    shown = [toml_value(pattern) for pattern in DEFAULT_BLOCKED_PATTERNS]

    folded = runner(tmp_path).invoke(app, ["config", "show", "-c", str(config)])
    full = runner(tmp_path).invoke(app, ["config", "show", "--full", "-c", str(config)])

    assert folded.exit_code == full.exit_code == 0
    patterns = row(folded.output, "safety.blocked_patterns")
    assert shown[0][:40] in patterns and "…" in patterns  # the first, cut to one line
    assert shown[1] in folded.output
    assert "… 8 more (--full shows all 10)" in folded.output
    assert not any(pattern in folded.output for pattern in shown[2:])
    assert len(folded.output.splitlines()) < len(full.output.splitlines())
    for pattern in shown:
        if len(pattern) < 90:  # the longest ones wrap over two lines
            assert pattern in full.output
    assert "more (--full" not in full.output
