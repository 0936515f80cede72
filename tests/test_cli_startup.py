"""What a command loads before it answers: `--version` and `--help` start without the
runner, httpx, pydantic or rich, and the read-only commands without the runner, the HTTP
client or the config editor."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from typer.testing import CliRunner

from ouroboros.cli import app
from tests.ui_sample import write_sample_run

# Runs the CLI as the `ouroboros` script does, then prints which of these were imported (a
# command that failed early would load nothing and prove nothing: it fails the probe).
PROBE = """
import sys
from ouroboros.cli import main
try:
    main()
except SystemExit as exit:
    assert not exit.code, f"the command failed: exit {exit.code}"
watched = ("httpx", "rich", "pydantic", "asyncio", "ouroboros.loop.runner", "ouroboros.server.client",
           "ouroboros.loop.session", "tomlkit")
print("loaded:", " ".join(sorted(m for m in watched if m in sys.modules)))
"""


def loaded_by(*args: str, cwd: Path | None = None) -> set[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True,
                          text=True, cwd=cwd, timeout=60)
    line = (done.stdout.strip().splitlines() or [""])[-1]
    assert line.startswith("loaded:"), done.stdout + done.stderr
    return set(line.split()[1:])


@pytest.mark.parametrize("args", [["--version"], ["--help"]])
def test_version_and_help_load_nothing_heavy(args):
    assert loaded_by(*args) == set()


@pytest.mark.parametrize("command", ["status", "runs", "logs"])
def test_read_only_commands_do_not_load_the_runner(tmp_path, command):
    (tmp_path / "ouroboros.toml").write_text('[model]\nbase_url = "http://127.0.0.1:11434"\n')
    write_sample_run(tmp_path / ".ouroboros", ended=True)

    loaded = loaded_by(command, cwd=tmp_path)

    assert not loaded & {"asyncio", "ouroboros.loop.runner", "ouroboros.server.client",
                         "ouroboros.loop.session", "httpx", "tomlkit"}
    if command == "logs":  # plain lines: no rich
        assert "rich" not in loaded


def test_help_lists_the_commands_in_the_order_of_use():
    help_text = CliRunner().invoke(app, ["--help"]).output

    rows = help_text.split("Commands:\n")[1].splitlines()
    names = [row.split()[0] for row in rows if row.startswith("  ") and row[2] != " "]
    assert names == ["run", "resume", "init", "reload", "tell", "status", "runs", "stats", "logs",
                     "watch", "prune", "demo", "config"]


def test_every_command_is_found_in_the_module_main_imports_for_it():
    from ouroboros.cli import COMMAND_MODULES

    names = {info.name or info.callback.__name__: info.callback.__module__.rsplit(".", 1)[-1]
             for info in app.registered_commands}
    names.update({group.name: group.typer_instance.registered_commands[0].callback.__module__
                  .rsplit(".", 1)[-1] for group in app.registered_groups})

    assert names == COMMAND_MODULES  # a command missing here would load every module


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["bogus"], "No such command 'bogus'"),
        (["run", "--max-turns", "-1"], "Invalid value for '--max-turns'"),
        (["status", "extra"], "unexpected extra argument"),
        (["config", "set"], "Missing argument 'KEY'"),
    ],
)
def test_a_mistyped_command_line_is_one_line_and_exit_2(tmp_path, args, said):
    result = subprocess.run([sys.executable, "-m", "ouroboros", *args], cwd=tmp_path,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert said in result.stderr
