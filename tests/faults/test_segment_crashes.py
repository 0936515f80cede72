"""Kills that land while the log rolls over into a segment, while retention removes old
history and while the snapshot is written (all three happen together at a session boundary):
a resume goes on from what was saved, nothing recorded is lost, nothing is run twice, and
every reader still reads the run."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from ouroboros.store.log import list_runs, run_records
from ouroboros.store.segments import SEGMENTS_DIR, load_manifest
from tests.crash_helpers import (
    CountingAgent,
    demo_project,
    executions,
    kill,
    kill_held_tool,
    start_forked,
    wait_for,
)
from tests.helpers import ouroboros_here, parts_recorded

PARTS = 10
# A segment closed at nearly every turn, and retention that keeps only what the run needs.
TINY_SEGMENTS = {"segment_mb": 0.0001, "keep_mb": 0.000001}
KILLS = 5


def the_run(root: Path) -> Path | None:
    runs = list_runs(root / ".ouroboros")
    return root / ".ouroboros" / "runs" / runs[-1] if runs else None


def rollovers(root: Path) -> int:
    """How many segments the run has closed (its newest segment's number)."""
    run = the_run(root)
    if run is None or not (run / SEGMENTS_DIR).is_dir():
        return 0
    names = [n for n in os.listdir(run / SEGMENTS_DIR) if n[:6].isdigit()]
    return max((int(n[:6]) for n in names), default=0)


def killed_at_a_rollover(root: Path, *args: str) -> bool:
    """Start `ouroboros ARGS`, kill it as soon as it closes a segment; False when it ended
    first."""
    before = rollovers(root)
    process = start_forked(*args, root=root)
    try:
        wait_for(
            lambda: rollovers(root) > before or process.poll() is not None,
            "a segment closed",
            timeout=60,
        )
        ended = process.poll() is not None
    finally:
        kill(process)
        kill_held_tool(root)
    return not ended


def tiny_segments_project(root: Path, scripted_server: Any, parts: int) -> tuple[Path, str]:
    """A project whose run of a `parts`-part task closes a segment every few turns and prunes
    all retention lets go: its config and the results the task ends with."""
    agent = CountingAgent(parts)
    agent.server = scripted_server(agent)
    return demo_project(
        root,
        agent.server.base_url,
        parts,
        max_turns=400,
        chars_per_part=3000,
        model={"context_limit": 4096},
        context={"carryover_turns": 2},
        logging=TINY_SEGMENTS,
    )


def test_kills_at_rollovers_lose_nothing_and_run_nothing_twice(tmp_path, scripted_server):
    config, expected = tiny_segments_project(tmp_path, scripted_server, PARTS)
    args = ("--config", str(config), "--headless")

    kills = int(killed_at_a_rollover(tmp_path, "run", *args))
    for _ in range(KILLS):
        if not kills or not killed_at_a_rollover(tmp_path, "resume", *args):
            break
        kills += 1
    result = ouroboros_here("resume", *args)

    assert kills >= 2, "the kills never landed at a rollover"
    assert result.returncode == 0, result.stderr + result.stdout[-1000:]
    assert_nothing_lost_nothing_twice(tmp_path, expected)
    status = ouroboros_here("status", "--config", str(config))
    assert status.returncode == 0 and "task_complete" in status.stdout, status.stderr
    run = the_run(tmp_path)
    assert run is not None
    assert all(s["file"].endswith(".gz") for s in load_manifest(run).segments[:-1])


def assert_nothing_lost_nothing_twice(root: Path, expected: str, pruned: bool = True) -> None:
    """The task's results are whole, no command and no tool call ran twice, and what
    retention kept of the log reads whole and in order up to the run's end (`pruned`: and
    retention removed some)."""
    assert (root / "workspace" / "results.txt").read_text() == expected, parts_recorded(root)
    ran = executions(root)
    assert ran and set(ran.values()) == {1}, ran.most_common(3)  # no command ran twice
    run = the_run(root)
    assert run is not None
    records = list(run_records(run))  # what retention kept reads, whole and in order
    seqs = [r["seq"] for r in records]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    started = Counter(r["id"] for r in records if r["type"] == "tool_call")
    assert set(started.values()) == {1}
    assert records[-1]["type"] == "run_end" and records[-1]["reason"] == "task_complete"
    manifest = load_manifest(run)
    assert manifest.problem is None
    assert manifest.pruned.get("segments", 0) > 0 or not pruned
