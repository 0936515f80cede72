"""What a command loads before it answers: `--version` and `--help` start without the
runner, httpx, pydantic or rich, and every read-only command (`watch` included) without the
runner, the sandbox, the HTTP client or the config editor."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ouroboros.cli import app
from tests.ui_sample import write_sample_run

WATCHED = (
    "httpx",
    "rich",
    "pydantic",
    "asyncio",
    "ouroboros.loop.runner",
    "ouroboros.server.client",
    "ouroboros.loop.session",
    "ouroboros.sandbox",
    "tomlkit",
)
# Runs the CLI as the `ouroboros` script does, then prints its exit code and which of WATCHED
# were imported (a command that failed early would load nothing and prove nothing: the tests
# check the exit code too).
PROBE = f"""
import sys
from ouroboros.cli import main
try:
    main()
    code = 0
except SystemExit as exit:
    code = exit.code or 0
print("loaded:", code, " ".join(sorted(m for m in {WATCHED!r} if m in sys.modules)))
"""
# The same for many command lines at once: one interpreter imports what every command loads
# anyway (typer, pydantic, the config), then forks a child for each command line, which runs
# it with its output thrown away and reports as PROBE does, a line each, in order.
PROBES = f"""
import json, os, sys
import typer, pydantic, ouroboros.config, ouroboros.cli.common
from ouroboros.cli import main
for args in json.loads(sys.argv[1]):
    sys.stdout.flush()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        quiet = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(quiet, fd)
        sys.argv = ["ouroboros", *args]
        try:
            main()
            code = 0
        except SystemExit as exit:
            code = exit.code or 0
        loaded = " ".join(sorted(m for m in {WATCHED!r} if m in sys.modules))
        os.write(write, f"loaded: {{code}} {{loaded}}".encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        print(pipe.read() or "loaded: none")
    os.waitpid(child, 0)
"""
# Never loaded by a command that only looks: the run's machinery, its sandbox, its HTTP client.
RUN_MACHINERY = {
    "ouroboros.loop.runner",
    "ouroboros.loop.session",
    "ouroboros.sandbox",
    "ouroboros.server.client",
    "httpx",
}


def loaded_by(*args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=60
    )
    line = (done.stdout.strip().splitlines() or [""])[-1]
    assert line.startswith("loaded: 0"), done.stdout + done.stderr
    return set(line.split()[2:])


def loaded_by_each(commands: list[tuple[str, ...]], cwd: Path) -> list[tuple[int, set[str]]]:
    """(exit code, the WATCHED modules loaded) of each command line, run in `cwd`."""
    done = subprocess.run(
        [sys.executable, "-c", PROBES, json.dumps(commands)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
    )
    lines = [line.split() for line in done.stdout.splitlines() if line.startswith("loaded:")]
    assert len(lines) == len(commands), done.stdout + done.stderr
    return [(int(line[1]), set(line[2:])) for line in lines]


@pytest.mark.parametrize("args", [["--version"], ["--help"]])
def test_version_and_help_load_nothing_heavy(args):
    assert loaded_by(*args) == set()


# Every command `ouroboros --help` lists that only looks (with the arguments that take
# another path through it, and the exit code it gives for the sample run: ended, resumable),
# and those that change something; a new command must be put in one or the other.
READ_ONLY = {
    ("status",): 0,
    ("status", "--json"): 3,
    ("runs",): 0,
    ("stats",): 0,
    ("stats", "--all"): 0,
    ("logs",): 0,
    ("logs", "--follow", "--json"): 0,
    ("watch",): 0,
    ("watch", "--json"): 0,
    ("config", "show"): 0,
    ("config", "get", "model.name"): 0,
}
CHANGING = {
    "run",
    "resume",
    "init",
    "reload",
    "tell",
    "prune",
    "demo",
    "config set",
    "config unset",
}


def test_every_command_is_read_only_or_changing():
    from ouroboros.cli import commands

    cli = commands()
    listed = {info.name or info.callback.__name__ for info in cli.registered_commands}
    listed |= {
        f"{group.name} {info.name}"
        for group in cli.registered_groups
        for info in group.typer_instance.registered_commands
    }
    looking = {" ".join(args[:2]) if args[0] == "config" else args[0] for args in READ_ONLY}

    assert not looking & CHANGING
    assert listed == looking | CHANGING


def test_read_only_commands_load_no_runner_no_sandbox_no_httpx(tmp_path):
    (tmp_path / "ouroboros.toml").write_text('[model]\nbase_url = "http://127.0.0.1:11434"\n')
    write_sample_run(tmp_path / ".ouroboros", ended=True)  # `watch` ends at its run_end

    found = dict(zip(READ_ONLY, loaded_by_each(list(READ_ONLY), cwd=tmp_path)))

    assert {args: code for args, (code, _) in found.items()} == READ_ONLY
    assert {args: loaded & RUN_MACHINERY for args, (_, loaded) in found.items()} == {
        args: set() for args in READ_ONLY
    }
    assert not [
        args for args, (_, loaded) in found.items() if "tomlkit" in loaded and args[0] != "config"
    ]  # the config editor
    assert not [args for args in (("status",), ("runs",), ("logs",)) if "asyncio" in found[args][1]]
    assert not [
        args for args, (_, loaded) in found.items() if "rich" in loaded and args[0] == "logs"
    ]  # plain lines: no rich


def test_help_lists_the_commands_in_the_order_of_use():
    help_text = CliRunner().invoke(app, ["--help"]).output

    rows = help_text.split("Commands:\n")[1].splitlines()
    names = [row.split()[0] for row in rows if row.startswith("  ") and row[2] != " "]
    assert names == [
        "run",
        "resume",
        "init",
        "reload",
        "tell",
        "status",
        "runs",
        "stats",
        "logs",
        "watch",
        "prune",
        "demo",
        "config",
    ]


def test_every_command_is_found_in_the_module_main_imports_for_it():
    from ouroboros.cli import COMMAND_MODULES

    names = {
        info.name or info.callback.__name__: info.callback.__module__.rsplit(".", 1)[-1]
        for info in app.registered_commands
    }
    names.update(
        {
            group.name: group.typer_instance.registered_commands[0].callback.__module__.rsplit(
                ".", 1
            )[-1]
            for group in app.registered_groups
        }
    )

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
    result = subprocess.run(
        [sys.executable, "-m", "ouroboros", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert said in result.stderr
