"""SIGKILLs that land at a chosen point inside pruning (the manifest already says a segment is
gone, its file is still there) and inside a snapshot write (the temporary file half written,
state.json not replaced yet): a resume goes on from what was saved, nothing recorded is lost,
nothing is run twice, and every reader still reads the run.

The harness runs as `ouroboros` does, in a process forked from the test's, with one of its
store functions wrapped there (by `killer`) so that its Nth call kills the process with
SIGKILL."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Callable

import pytest

import ouroboros.store.retention as retention
import ouroboros.store.state_file as state_file
from ouroboros.store.segments import load_manifest, segment_files
from ouroboros.store.state_file import STATE_FILE, read_state
from tests.crash_helpers import WAIT_SECS, kill_held_tool
from tests.faults.test_segment_crashes import (
    assert_nothing_lost_nothing_twice,
    the_run,
    tiny_segments_project,
)
from tests.helpers import ouroboros_child, ouroboros_here

PARTS = 26  # enough for three restarts, and prunes after each


def killer(point: str, nth: int) -> Callable[[], None]:
    """What the child does first: wrap the store function at `point` so that its `nth` call
    dies (SIGKILL) just after the manifest says a segment is pruned, or half-way through
    writing state.json's temporary file."""
    calls = [0]

    def due() -> bool:
        calls[0] += 1
        return calls[0] == nth

    def after_manifest(run_dir, manifest, _original=retention.write_manifest):
        _original(run_dir, manifest)
        if due():  # listed as pruned; the files not unlinked yet
            os.kill(os.getpid(), signal.SIGKILL)

    def half_snapshot(directory, name, data, *, durable=True, _original=state_file.replace_in):
        if name == "state.json" and due():  # dies writing the temporary file
            fd = os.open(".ouroboros-killed.tmp", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=directory)
            os.write(fd, data[: len(data) // 2])
            os.close(fd)
            os.kill(os.getpid(), signal.SIGKILL)
        _original(directory, name, data, durable=durable)

    def prepare() -> None:
        if point == "prune":
            retention.write_manifest = after_manifest
        else:
            state_file.replace_in = half_snapshot

    return prepare


def killed_at(root: Path, point: str, nth: int, *args: str) -> bool:
    """`ouroboros ARGS` killed at the `nth` pruning or snapshot write; False when it ended
    before that."""
    process = ouroboros_child(*args, timeout=WAIT_SECS, prepare=killer(point, nth))
    kill_held_tool(root)
    assert process.returncode in (-signal.SIGKILL, 0), process.stderr[-2000:]
    return process.returncode == -signal.SIGKILL


@pytest.mark.parametrize("point", ["prune", "snapshot"])
def test_kills_inside_pruning_and_snapshot_writes_lose_nothing_and_run_nothing_twice(
    tmp_path, scripted_server, point
):
    config, expected = tiny_segments_project(tmp_path, scripted_server, PARTS)
    args = ("--config", str(config), "--headless")

    kills = 0
    for command, nth in (("run", 2), ("resume", 2), ("resume", 3), ("resume", 2)):
        if not killed_at(tmp_path, point, nth, command, *args):
            break  # it finished first
        kills += 1
    else:
        result = ouroboros_child("resume", *args, timeout=WAIT_SECS)
        assert result.returncode == 0, result.stderr + result.stdout[-1000:]

    assert kills >= 3, f"the kills never landed in a {point}"
    assert_nothing_lost_nothing_twice(tmp_path, expected)
    run = the_run(tmp_path)
    assert run is not None
    listed = {s["number"] for s in load_manifest(run).segments}
    assert set(segment_files(run)) == listed  # what a killed pruning left was removed after
    assert read_state(run) is not None and (run / STATE_FILE).exists()
    status = ouroboros_here("status", "--config", str(config))
    assert status.returncode == 0 and "task_complete" in status.stdout, status.stderr
