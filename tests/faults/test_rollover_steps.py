"""A SIGKILL after every step of a log rollover, of a segment's compression and of a pruning
(segments.STEP_HOOKS names each step as it is done): the run is still listed by `status`,
`resume` continues it under the same id to the result of an uninterrupted run, nothing
recorded is lost and nothing is run twice.

The run is `ouroboros run` in a process forked from the test's, a hook added there (by
`killer`) that kills it with SIGKILL when the step is reached the `nth` time; then `ouroboros
resume` finishes it."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Callable

import pytest

import ouroboros.store.segments as segments
from ouroboros.store.log import list_runs
from tests.crash_helpers import WAIT_SECS, kill_held_tool
from tests.faults.test_segment_crashes import (
    assert_nothing_lost_nothing_twice,
    tiny_segments_project,
)
from tests.helpers import ouroboros_child, ouroboros_here, sweep

PARTS = 4
PRUNING_PARTS = 10  # pruning begins after a session restart: the run needs to be longer
STEPS = [  # (step, the nth time it is reached)
    ("rollover: first manifest written", 1),
    ("rollover: segments/ made", 1),
    ("rollover: segment moved", 1),  # the first rollover: once, the run vanished here
    ("rollover: moved durably", 1),
    ("rollover: segment listed", 1),
    ("rollover: new segment begun", 1),
    ("rollover: segment moved", 3),
    ("rollover: segment listed", 3),
    ("compression: .gz.tmp written", 1),
    ("compression: .gz in place", 2),
    ("compression: .gz listed", 2),
    ("pruning: manifest written", 1),
    ("pruning: a file removed", 1),
]


def killer(step: str, nth: int) -> Callable[[], None]:
    """What the child does first: die (SIGKILL) the `nth` time `step` is done."""
    calls = [0]

    def hook(done: str) -> None:
        if done == step:
            calls[0] += 1
            if calls[0] == nth:
                os.kill(os.getpid(), signal.SIGKILL)

    return lambda: segments.STEP_HOOKS.append(hook)


SAMPLE = {
    ("rollover: first manifest written", 1),
    ("rollover: segment moved", 1),
    ("rollover: new segment begun", 1),
    ("compression: .gz.tmp written", 1),
    ("pruning: a file removed", 1),
}


@pytest.mark.parametrize("step,nth", sweep(STEPS, SAMPLE, [f"{s}#{n}" for s, n in STEPS]))
def test_a_kill_after_any_step_of_a_rollover_resumes_to_the_uninterrupted_result(
    tmp_path, scripted_server, step, nth
):
    parts = PRUNING_PARTS if step.startswith("pruning") else PARTS
    config, expected = tiny_segments_project(tmp_path, scripted_server, parts)
    args = ("--config", str(config), "--headless")

    killed = ouroboros_child("run", *args, timeout=WAIT_SECS, prepare=killer(step, nth))
    kill_held_tool(tmp_path)
    assert killed.returncode == -signal.SIGKILL, f"never reached {step!r}: {killed.stderr}"
    state_dir = tmp_path / ".ouroboros"
    runs = list_runs(state_dir)
    status = ouroboros_here("status", "--config", str(config))
    resumed = ouroboros_child("resume", *args, timeout=WAIT_SECS)

    assert len(runs) == 1, runs
    assert runs[0] in status.stdout, status.stdout + status.stderr
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout[-1000:]
    assert "Traceback" not in resumed.stderr, resumed.stderr
    assert list_runs(state_dir) == runs  # the same run, not a new one beside it
    assert_nothing_lost_nothing_twice(tmp_path, expected, pruned=step.startswith("pruning"))


def test_a_kill_just_after_the_first_segment_moves_leaves_a_run_that_resumes(
    tmp_path, scripted_server
):
    """As the tests above, with a function wrapped that an Ouroboros without the steps hook
    has too (the directory sync just after the segment's rename)."""
    config, expected = tiny_segments_project(tmp_path, scripted_server, PARTS)
    args = ("--config", str(config), "--headless")

    def prepare() -> None:
        def die(directory: Path) -> None:
            os.kill(os.getpid(), signal.SIGKILL)

        segments.sync_directory = die

    killed = ouroboros_child("run", *args, timeout=WAIT_SECS, prepare=prepare)
    kill_held_tool(tmp_path)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    runs = list_runs(tmp_path / ".ouroboros")
    resumed = ouroboros_child("resume", *args, timeout=WAIT_SECS)
    again = ouroboros_child("run", "--continue", *args, timeout=WAIT_SECS)

    assert len(runs) == 1, runs
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout[-1000:]
    assert again.returncode == 0, again.stderr
    assert list_runs(tmp_path / ".ouroboros") == runs
    assert_nothing_lost_nothing_twice(tmp_path, expected, pruned=False)
