"""SIGKILLs that land at a chosen point inside pruning (the manifest already says a segment is
gone, its file is still there) and inside a snapshot write (the temporary file half written,
state.json not replaced yet): a resume goes on from what was saved, nothing recorded is lost,
nothing is run twice, and every reader still reads the run.

The harness runs as `ouroboros` does, with one of its store functions wrapped (in the child
process only, by the code in KILLER) so that the Nth call kills the process with SIGKILL."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ouroboros.store.log import SNAPSHOT_FILE, read_snapshot
from ouroboros.store.segments import load_manifest, segment_files
from tests.crash_helpers import WAIT_SECS, kill_held_tool
from tests.faults.test_segment_crashes import assert_nothing_lost_nothing_twice, the_run, \
    tiny_segments_project
from tests.helpers import clean_env, ouroboros

PARTS = 20
KILLER = """
import os, runpy, signal, sys
import ouroboros.store.log as log, ouroboros.store.retention as retention
point, nth = sys.argv.pop(1), int(sys.argv.pop(1))
calls = [0]

def due():
    calls[0] += 1
    return calls[0] == nth

def after_manifest(run_dir, manifest, _original=retention.write_manifest):
    _original(run_dir, manifest)
    if due():  # listed as pruned; the files not unlinked yet
        os.kill(os.getpid(), signal.SIGKILL)

def half_snapshot(path, text, _original=log.write_atomically):
    if path.name == "state.json" and due():  # dies writing the temporary file
        (path.parent / ".ouroboros-killed.tmp").write_text(text[: len(text) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    _original(path, text)

if point == "prune":
    retention.write_manifest = after_manifest
else:
    log.write_atomically = half_snapshot
sys.argv[0] = "ouroboros"
runpy.run_module("ouroboros", run_name="__main__", alter_sys=True)
"""


def killed_at(root: Path, point: str, nth: int, *args: str) -> bool:
    """`ouroboros ARGS` killed at the `nth` pruning or snapshot write; False when it ended
    before that."""
    process = subprocess.run([sys.executable, "-c", KILLER, point, str(nth), *args],
                             env=clean_env(), capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=WAIT_SECS)
    kill_held_tool(root)
    assert process.returncode in (-signal.SIGKILL, 0), process.stderr[-2000:]
    return process.returncode == -signal.SIGKILL


@pytest.mark.parametrize("point", ["prune", "snapshot"])
def test_kills_inside_pruning_and_snapshot_writes_lose_nothing_and_run_nothing_twice(
        tmp_path, scripted_server, point):
    config, expected = tiny_segments_project(tmp_path, scripted_server, PARTS)
    args = ("--config", str(config), "--headless")

    kills = 0
    for command, nth in (("run", 2), ("resume", 2), ("resume", 3), ("resume", 2)):
        if not killed_at(tmp_path, point, nth, command, *args):
            break  # it finished first
        kills += 1
    else:
        result = ouroboros("resume", *args, timeout=120)
        assert result.returncode == 0, result.stderr + result.stdout[-1000:]

    assert kills >= 3, f"the kills never landed in a {point}"
    assert_nothing_lost_nothing_twice(tmp_path, expected)
    run = the_run(tmp_path)
    assert run is not None
    listed = {s["number"] for s in load_manifest(run).segments}
    assert set(segment_files(run)) == listed  # what a killed pruning left was removed after
    assert read_snapshot(run) is not None and (run / SNAPSHOT_FILE).exists()
    status = ouroboros("status", "--config", str(config))
    assert status.returncode == 0 and "task_complete" in status.stdout, status.stderr
