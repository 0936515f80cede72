"""`ouroboros demo`: the real harness against the scripted model, then its stats."""

from __future__ import annotations

from typer.testing import CliRunner

from ouroboros.cli import app


def test_demo_runs_and_keeps_its_project(tmp_path):
    directory = tmp_path / "demo"

    result = CliRunner(env={"COLUMNS": "100"}).invoke(
        app, ["demo", "--headless", "--parts", "3", "--keep", str(directory)])

    assert result.exit_code == 0, result.output
    assert "run ended: task_complete" in result.output
    assert result.output.endswith(f"the demo project is in {directory}\nsee what happened: "
                                  f"ouroboros stats --config {directory / 'ouroboros.toml'}\n")
    results = (directory / "workspace" / "results.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in results] == ["part_001", "part_002", "part_003"]

    stats = CliRunner(env={"COLUMNS": "100"}).invoke(
        app, ["stats", "--config", str(directory / "ouroboros.toml")])
    assert stats.exit_code == 0, stats.output
    assert "ended: task_complete" in stats.output


def test_demo_will_not_take_over_a_real_project(tmp_path):
    (tmp_path / "ouroboros.toml").write_text("[model]\nname = 'mine'\n")

    result = CliRunner().invoke(app, ["demo", "--headless", "--keep", str(tmp_path)])

    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: {tmp_path} holds a project that is not a demo; "
                                     "pick another directory")
    assert (tmp_path / "ouroboros.toml").read_text() == "[model]\nname = 'mine'\n"
