"""The small things a person meets: a --base-url typed as OLLAMA_HOST is, --help without
typer's type names, the demo's last line, and a system prompt edit that gets its line."""

from __future__ import annotations

import tempfile

import pytest

from ouroboros.config import load_config
from tests.helpers import clean_env, make_project, ouroboros_here


@pytest.mark.parametrize(
    "given,url",
    [
        ("gpu-box", "http://gpu-box:11434"),
        ("127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("0.0.0.0", "http://127.0.0.1:11434"),
        ("https://example.com/v1", "https://example.com"),
    ],
)
def test_base_url_flag_is_read_as_ollama_host_is(given, url):
    by_flag = load_config(flags={"model.base_url": given}, env={}, user_file=None)
    by_env = load_config(env={"OLLAMA_HOST": given}, user_file=None)

    assert by_flag.config.model.base_url == by_env.config.model.base_url == url
    assert by_flag.sources["model.base_url"] == "flag"


def test_a_run_takes_a_base_url_without_its_scheme(tmp_path, scripted_server):
    from tests.faults.parts_agent import PartsAgent

    server = scripted_server(PartsAgent(1))
    config = make_project(tmp_path, "http://127.0.0.1:9")
    bare = server.base_url.removeprefix("http://")

    result = ouroboros_here("run", "--config", str(config), "--base-url", bare, "--headless")

    assert result.returncode == 0, result.stderr
    assert "task_complete" in result.stdout


@pytest.mark.parametrize(
    "command",
    [
        "run",
        "resume",
        "logs",
        "stats",
        "watch",
        "demo",
        "init",
        "status",
        "runs",
        "config show",
        "config get",
        "config set",
        "config unset",
    ],
)
def test_help_shows_plain_placeholders_not_typers_type_names(command):
    result = ouroboros_here(*command.split(), "--help", env=clean_env(COLUMNS="100"))

    assert result.returncode == 0
    assert "[[" not in result.stdout and "range>" not in result.stdout
    assert "<str>" not in result.stdout.split("Options:")[-1]  # options say PATH, N, TEXT...
    assert (
        "<path>" not in result.stdout and "<list[str]>" not in result.stdout.split("Options:")[-1]
    )


def run_ended_line(output: str) -> str:
    return next(line for line in output.splitlines() if " run ended: " in line)


def test_the_demo_never_suggests_resuming_the_project_it_removes(tmp_path, monkeypatch):
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # TMPDIR, once read by this process

    result = ouroboros_here("demo", "--speed", "max", env=clean_env(TMPDIR=str(temp)))

    assert result.returncode == 0, result.stderr
    assert "resume" not in run_ended_line(result.stdout)
    assert "ouroboros resume" not in result.stdout


def test_a_kept_demo_says_how_to_resume_it_from_anywhere(tmp_path):
    kept = tmp_path / "demo"

    result = ouroboros_here("demo", "--speed", "max", "--keep", str(kept), cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    assert f"ouroboros resume --config {kept / 'ouroboros.toml'} --message" in run_ended_line(
        result.stdout
    )


def test_a_second_demo_into_the_same_directory_shows_the_whole_demo_again(tmp_path):
    kept = tmp_path / "demo"
    first = ouroboros_here("demo", "--speed", "max", "--keep", str(kept), cwd=tmp_path)

    second = ouroboros_here("demo", "--speed", "max", "--keep", str(kept), cwd=tmp_path)

    assert second.returncode == 0, second.stderr
    assert (
        run_ended_line(second.stdout).split(" after ")[1]
        == run_ended_line(first.stdout).split(" after ")[1]
    )
    assert "Wind-down:" in second.stdout and "Restart (" in second.stdout


@pytest.mark.parametrize(
    "typed,meant",
    [
        ("context.sotf", "context.soft_threshold_pct"),
        ("context.sof_threshold_pct", "context.soft_threshold_pct"),
        ("modle.name", "model.name"),
    ],
)
def test_a_mistyped_key_suggests_the_key_meant(tmp_path, typed, meant):
    config = tmp_path / "ouroboros.toml"
    config.write_text("")

    result = ouroboros_here("config", "set", typed, "1", "--config", str(config))

    assert result.returncode == 2
    assert result.stderr == f"error: unknown key {typed} (did you mean {meant}?)\n"
