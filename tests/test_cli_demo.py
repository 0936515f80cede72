"""`ouroboros demo`: the real harness against the scripted model, narrated, then cleaned up."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ouroboros.cli import app
from tests.helpers import clean_env, ouroboros

CAPTION = "  » "


def captions(output: str) -> list[str]:
    return [line[len(CAPTION) :] for line in output.splitlines() if line.startswith(CAPTION)]


def test_the_demo_explains_itself_and_leaves_nothing_behind(tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()

    result = ouroboros("demo", "--speed", "max", env=clean_env(TMPDIR=str(temp)))

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(
        "Ouroboros demo: a scripted agent (no model server needed) must "
        "copy the KEY line of 12 files into results.txt"
    )
    said = captions(result.stdout)
    firsts = [
        next(i for i, text in enumerate(said) if text.startswith(start))
        for start in (
            "Masked: the context passed the soft threshold",
            "Wind-down: the context is",
            "Restart (",
            "The new session also ends its first prompt with a handoff",
            "The agent called task_complete",
        )
    ]
    assert firsts == sorted(firsts)  # each explained as it happens, in the order it happens
    assert "NOTES.md" in said[firsts[1]] and "memory file (NOTES.md" in said[firsts[2]]
    first_result = next(line for line in lines if re.search(r" -> \w+ (ok|FAILED)", line))
    assert " -> list_dir ok" in first_result
    assert "FAILED" not in result.stdout
    assert lines[-2:] == [
        "The demo's temporary project is removed. To look around after the run, keep it with "
        "`ouroboros demo --keep DIR`, then `ouroboros stats --config DIR/ouroboros.toml` and "
        "`ouroboros logs --config DIR/ouroboros.toml` show what happened.",
        "Start your own agent: `ouroboros init my-agent`, write its mission in "
        "my-agent/SYSTEM_PROMPT.md, then `cd my-agent && ouroboros run`.",
    ]
    assert list(temp.glob("ouroboros-demo-*")) == []


def test_keep_keeps_the_project_and_the_closing_points_to_it(tmp_path):
    directory = tmp_path / "demo"

    result = CliRunner(env={"COLUMNS": "100"}).invoke(
        app, ["demo", "--headless", "--parts", "3", "--keep", str(directory)]
    )

    assert result.exit_code == 0, result.output
    assert "run ended: task_complete" in result.output
    config = directory / "ouroboros.toml"
    assert result.output.endswith(
        f"The demo project is in {directory}.\n"
        f"See what happened: ouroboros stats --config {config}\n"
        f"Every event: ouroboros logs --config {config}\n"
        "Start your own agent: `ouroboros init my-agent`, write its mission in "
        "my-agent/SYSTEM_PROMPT.md, then `cd my-agent && ouroboros run`.\n"
    )
    results = (directory / "workspace" / "results.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in results] == ["part_001", "part_002", "part_003"]

    stats = CliRunner(env={"COLUMNS": "100"}).invoke(app, ["stats", "--config", str(config)])
    assert stats.exit_code == 0, stats.output
    assert "ended: task_complete" in stats.output


@pytest.mark.slow  # paced: seconds pass before the agent's first reply
def test_ctrl_c_stops_the_paced_demo_and_removes_its_project(tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    demo = subprocess.Popen(
        [sys.executable, "-m", "ouroboros", "demo", "--headless", "--speed", "1"],
        env=clean_env(TMPDIR=str(temp)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        seen = []
        for line in demo.stdout:  # the agent's first reply: the run is under way, and paced
            seen.append(line)
            if " t1 assistant: " in line:
                break
        assert list(temp.glob("ouroboros-demo-*")), "".join(seen)
        demo.send_signal(signal.SIGINT)
        rest, errors = demo.communicate(timeout=60)
    finally:
        demo.kill()

    assert demo.returncode == 130, errors  # 128 + SIGINT, as any run stopped by Ctrl+C
    assert "  » Stopped by Ctrl+C at once" in rest
    assert "The demo's temporary project is removed." in rest
    assert list(temp.glob("ouroboros-demo-*")) == []


def test_a_speed_that_is_not_a_number_is_refused(tmp_path):
    result = CliRunner().invoke(app, ["demo", "--speed", "fast", "--keep", str(tmp_path)])

    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: --speed takes a positive number (2 is twice as fast) or max, not 'fast'"
    )
    assert list(tmp_path.iterdir()) == []


def test_demo_will_not_take_over_a_real_project(tmp_path):
    (tmp_path / "ouroboros.toml").write_text("[model]\nname = 'mine'\n")

    result = CliRunner().invoke(app, ["demo", "--headless", "--keep", str(tmp_path)])

    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: {tmp_path} holds a project that is not a demo; pick another directory"
    )
    assert (tmp_path / "ouroboros.toml").read_text() == "[model]\nname = 'mine'\n"


def screenshot(page: Path, after: str) -> list[str]:
    text = page.read_text(encoding="utf-8")
    start = text.index("```\n", text.index(after)) + 4
    return text[start : text.index("```", start)].splitlines()


def test_the_demo_screenshots_in_the_readme_and_the_manual_are_the_demos(tmp_path):
    """What the README and docs/what-you-see.md show of the demo is what a demo run shows
    now: its counters (the rate aside), its gauge's figures and its last reply."""
    from ouroboros.ui.dashboard import DashboardState
    from ouroboros.ui.render import context_line, counters
    from tests.helpers import run_events

    result = CliRunner().invoke(app, ["demo", "--headless", "--keep", str(tmp_path / "d")])
    assert result.exit_code == 0, result.output
    state = DashboardState()
    for event in run_events(tmp_path / "d"):
        state.apply(event)
    shown_counters = counters(state, 96).plain.split("~tok/s")[0]
    figures = context_line(state, 96)[0].plain.split("  ", 1)[1].strip()
    root = Path(__file__).parent.parent
    pages = [
        (root / "README.md", "Here is `ouroboros demo --speed max` at its end"),
        (root / "docs" / "what-you-see.md", "so its dashboard has the header the run had:"),
    ]
    for page, after in pages:
        frame = screenshot(page, after)
        assert frame[1][2:].startswith(shown_counters), page
        assert frame[2][2:-2].rstrip().endswith(figures), page
        assert f"│ {state.text.strip()} " in frame[6], page
