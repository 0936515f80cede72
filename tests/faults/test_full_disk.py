"""A disk that fills up, or fails (EIO), at any write of a run: at a rollover, a compression,
a pruning, a snapshot or an event. The run ends with one line and exit 1, never a traceback;
its log ends with `run_end` (the end-reserve file is freed for it when the disk is full);
nothing written before is lost, and `ouroboros resume` finishes the task once there is room.

Two ways: a tiny tmpfs mounted on the state dir at a range of sizes (needs root; skipped
otherwise), and an OSError injected at each write point of a run forked from the test's."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
from pathlib import Path
from typing import Callable

import pytest

import ouroboros.store.log as log
import ouroboros.store.segments as segments
import ouroboros.store.state_file as state_file
from ouroboros.store.log import RESERVE_FILE, list_runs, run_records
from tests.crash_helpers import WAIT_SECS, kill_held_tool
from tests.faults.test_disk_and_pipes import one_line_error, tmpfs
from tests.faults.test_segment_crashes import (
    assert_nothing_lost_nothing_twice,
    tiny_segments_project,
)
from tests.helpers import ouroboros_child, sweep

PARTS = 4
SIZES_KB = list(range(40, 184, 8))  # a run of PARTS parts needs about 110 KB
SMALL_KB = 80  # a disk below this fills up before the run ends


def the_run(root: Path) -> Path:
    runs = list_runs(root / ".ouroboros")
    assert len(runs) == 1, runs
    return root / ".ouroboros" / "runs" / runs[0]


def check_ended_in_one_line(root: Path, result: subprocess.CompletedProcess, why: str) -> None:
    """Exit 1, one line naming the cause and how to go on, and the log ends with run_end (the
    run's own, where only the snapshot written after it failed)."""
    assert result.returncode == 1, result.stderr + result.stdout[-500:]
    line = one_line_error(result)
    assert why in line and "ouroboros resume" in line, line
    records = list(run_records(the_run(root)))
    assert records[-1]["type"] == "run_end", records[-3:]
    assert records[-2]["type"] == "session_end", records[-3:]


def finished(root: Path) -> bool:
    """Whether the run recorded the task's end (only what came after it failed)."""
    records = list(run_records(the_run(root)))
    return records[-1]["type"] == "run_end" and records[-1]["reason"] == "task_complete"


@pytest.mark.parametrize("kb", sweep(SIZES_KB, {40, 104, 168}, [f"{kb}k" for kb in SIZES_KB]))
def test_a_disk_that_fills_up_at_any_size_ends_with_one_line_and_run_end(
    tmp_path, scripted_server, kb
):
    config, expected = tiny_segments_project(tmp_path, scripted_server, PARTS)
    args = ("--config", str(config), "--headless")
    state_dir = tmp_path / ".ouroboros"
    with tmpfs(state_dir, f"{kb}k"):
        result = ouroboros_child("run", *args, timeout=WAIT_SECS)
        kill_held_tool(tmp_path)
        assert result.returncode != 0 or kb >= SMALL_KB, "a disk this small must fill up"
        if result.returncode != 0:
            check_ended_in_one_line(tmp_path, result, "No space left on device")
        subprocess.run(["mount", "-o", "remount,size=8m", str(state_dir)], check=True)
        if result.returncode != 0 and not finished(tmp_path):
            resumed = ouroboros_child("resume", *args, timeout=WAIT_SECS)
            assert resumed.returncode == 0, resumed.stderr + resumed.stdout[-1000:]
        assert_nothing_lost_nothing_twice(tmp_path, expected, pruned=False)


WRITE_POINTS = [
    *(
        step
        for step, _ in [
            ("rollover: first manifest written", 1),
            ("rollover: segments/ made", 1),
            ("rollover: segment moved", 1),
            ("rollover: moved durably", 1),
            ("rollover: segment listed", 1),
            ("rollover: new segment begun", 1),
            ("compression: .gz.tmp written", 1),
            ("compression: .gz in place", 1),
            ("compression: .gz listed", 1),
        ]
    ),
    "snapshot",
    "event",
]


def failing(point: str, code: int, nth: int) -> Callable[[], None]:
    """What the child does first: make the `nth` write at `point` fail with OSError(code)."""
    calls = [0]

    def due() -> bool:
        calls[0] += 1
        return calls[0] == nth

    def hook(done: str) -> None:
        if done == point and due():
            raise OSError(code, os.strerror(code))

    def snapshot(directory, name, data, *, durable=True, _original=state_file.replace_in):
        if name == "state.json" and due():
            raise OSError(code, os.strerror(code), name)
        _original(directory, name, data, durable=durable)

    def append(self, data, _original=log.EventLog._append):
        if due():
            raise OSError(code, os.strerror(code), str(self.path))
        _original(self, data)

    def prepare() -> None:
        if point == "snapshot":
            state_file.replace_in = snapshot
        elif point == "event":
            log.EventLog._append = append
        else:
            segments.STEP_HOOKS.append(hook)

    return prepare


FAILURES = [(point, code) for code in (errno.ENOSPC, errno.EIO) for point in WRITE_POINTS]
SAMPLE = {
    ("rollover: segment moved", errno.ENOSPC),
    ("compression: .gz.tmp written", errno.ENOSPC),
    ("snapshot", errno.ENOSPC),
    ("event", errno.ENOSPC),
    ("rollover: segment moved", errno.EIO),
}


@pytest.mark.parametrize(
    "point,code",
    sweep(FAILURES, SAMPLE, [f"{errno.errorcode[code]}-{point}" for point, code in FAILURES]),
)
def test_a_failed_write_at_any_point_ends_with_one_line_and_resume_finishes(
    tmp_path, scripted_server, point, code
):
    config, expected = tiny_segments_project(tmp_path, scripted_server, PARTS)
    args = ("--config", str(config), "--headless")
    nth = {"event": 20, "rollover: first manifest written": 1}.get(point, 2)

    result = ouroboros_child("run", *args, timeout=WAIT_SECS, prepare=failing(point, code, nth))
    kill_held_tool(tmp_path)

    assert result.returncode != -signal.SIGKILL
    if point.startswith("compression"):  # a segment left plain; the run goes on
        assert result.returncode == 0, result.stderr
    else:
        check_ended_in_one_line(tmp_path, result, os.strerror(code))
        if not finished(tmp_path):  # a snapshot after the end: nothing left to do
            resumed = ouroboros_child("resume", *args, timeout=WAIT_SECS)
            assert resumed.returncode == 0, resumed.stderr + resumed.stdout[-1000:]
    assert_nothing_lost_nothing_twice(tmp_path, expected, pruned=False)
    assert (the_run(tmp_path) / RESERVE_FILE).stat().st_size == log.RESERVE_BYTES
