"""A real run whose log closes many segments: `logs`, `logs -n`, `status`, `runs`, `stats`
and `prune` read it as one log, and `resume` continues it."""

from __future__ import annotations

import json

from ouroboros.store.log import last_records, run_records
from ouroboros.store.segments import MANIFEST_FILE
from tests.crash_helpers import CountingAgent, demo_project
from tests.helpers import ouroboros_here, run_dir


def segmented_project(root, scripted_server, *, max_turns: int):
    """A project whose run of the six-part task closes a segment every few turns and keeps
    all of them: its config and the results the task ends with."""
    agent = CountingAgent(6)
    agent.server = scripted_server(agent)
    return demo_project(
        root,
        agent.server.base_url,
        6,
        max_turns=max_turns,
        chars_per_part=3000,
        model={"context_limit": 4096},
        logging={"segment_mb": 0.0001, "keep_mb": 0},
    )


def test_the_commands_read_a_run_in_segments_as_one_log(tmp_path, scripted_server):
    config, expected = segmented_project(tmp_path, scripted_server, max_turns=400)
    args = ("--config", str(config))
    assert ouroboros_here("run", *args, "--headless").returncode == 0
    run = run_dir(tmp_path)
    manifest = json.loads((run / MANIFEST_FILE).read_text())
    assert len(manifest["segments"]) >= 3
    records = list(run_records(run))

    logs = ouroboros_here("logs", *args)
    tail = ouroboros_here("logs", *args, "-n", "3")
    status = ouroboros_here("status", *args)
    stats = ouroboros_here("stats", *args)
    runs = ouroboros_here("runs", *args)

    assert logs.returncode == 0 and len(logs.stdout.splitlines()) >= len(records) // 2
    assert "run started" in logs.stdout.splitlines()[0] or run.name in logs.stdout
    assert tail.returncode == 0 and tail.stdout.splitlines() == logs.stdout.splitlines()[-3:]
    turns = records[-1]["total_turns"]
    assert f"{turns} in total" in status.stdout, status.stdout
    assert "task_complete" in status.stdout
    assert stats.returncode == 0 and f"{turns} turns" in stats.stdout, stats.stdout
    assert runs.returncode == 0 and run.name in runs.stdout

    pruned = ouroboros_here("prune", *args)
    assert pruned.returncode == 0 and "nothing to prune" in pruned.stdout  # keep_mb = 0

    again = ouroboros_here(
        "resume", *args, "--headless", "--message", "check the results again", "--max-turns", "2"
    )
    assert again.returncode == 0, again.stderr
    resumed = list(run_records(run))
    assert [r["seq"] for r in resumed] == list(range(1, len(resumed) + 1))
    assert (tmp_path / "workspace" / "results.txt").read_text() == expected


def test_a_damaged_manifest_and_segment_are_one_line_naming_the_file_and_the_run_goes_on(
    tmp_path, scripted_server
):
    config, expected = segmented_project(tmp_path, scripted_server, max_turns=6)
    args = ("--config", str(config))
    ouroboros_here("run", *args, "--headless")  # paused at max_turns, some segments closed
    run = run_dir(tmp_path)
    (run / MANIFEST_FILE).write_text('{"segments": [')
    damaged = run / "segments" / "000002.jsonl.gz"
    damaged.write_bytes(b"not gzip at all")

    readers = {
        name: ouroboros_here(*command, *args)
        for name, command in {
            "logs": ["logs"],
            "stats --all": ["stats", "--all"],
            "status": ["status"],
            "stats": ["stats"],
            "runs": ["runs"],
            "logs -n 3": ["logs", "-n", "3"],
        }.items()
    }
    again = ouroboros_here("resume", *args, "--headless", "--max-turns", "400")

    for name, result in readers.items():
        assert "Traceback" not in result.stderr + result.stdout, name
        if name in ("logs", "stats --all", "stats", "logs -n 3"):  # one line naming both
            assert result.stderr.strip().count("\n") == 0, (name, result.stderr)
            assert str(damaged) in result.stderr, (name, result.stderr)
            assert str(run / MANIFEST_FILE) in result.stderr, (name, result.stderr)
    assert readers["status"].returncode == 0 and readers["stats"].returncode == 0
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "workspace" / "results.txt").read_text() == expected
    warnings = [r for r in last_records(run, 1000, lambda kind: kind == "warning")]
    assert any(str(run / MANIFEST_FILE) in w["message"] for w in warnings)
