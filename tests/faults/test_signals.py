"""Stop signals are obeyed at once: a real `ouroboros run --headless` gets SIGINT or SIGTERM
while it waits on a server that is down, answers 503, trickles a reply, or on a long tool
call, and exits with exit code 128 + the signal's number (130 for SIGINT, 143 for SIGTERM, so
a supervisor restarts it), a `stop_requested` and a `run_end` that records the same code,
having cancelled what it waited on rather than waited it out. A second signal never changes
the code. The floor (within a second) is timed by benchmarks/faults.py, not here: a busy
machine can delay any process by a second.

The runs are processes forked from the test's (tests.helpers.ouroboros_forked: the real entry
point, signals and exit code, without an interpreter to start); one is a whole new
`python -m ouroboros`, its exit code set as the interpreter exits."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from ouroboros.testing import Fault, Reply
from tests.crash_helpers import kill, wait_for
from tests.faults.parts_agent import (
    PartsAgent,
    held_pid,
    log_text,
    parts_project,
    start,
    start_forked,
    stop_and_time,
)
from tests.faults.servers import Status, Trickle, start_server
from tests.helpers import of_type, run_events


def logged(root: Path, event_type: str) -> list[dict]:
    path_exists = list((root / ".ouroboros" / "runs").glob("*/events.jsonl"))
    return of_type(run_events(root), event_type) if path_exists else []


def check_stopped(
    root: Path,
    process,
    elapsed: float,
    reasons: tuple[str, ...] = ("interrupted",),
    sig: signal.Signals = signal.SIGTERM,
) -> dict:
    code = 128 + sig
    # What each run waits on lasts longer than stop_and_time waits for the exit (a 60 s
    # outage, an endless trickle or 503, a `sleep 30` whose result must say interrupted): a
    # stop that waited it out instead of cancelling it fails there, whatever the machine.
    assert process.returncode == code, f"{log_text(root)} (stopped after {elapsed:.1f}s)"
    events = run_events(root)
    end = events[-1]
    assert end["type"] == "run_end", events[-3:]
    assert end["reason"] in reasons and (end["exit_code"], end["resumable"]) == (code, True)
    assert of_type(events, "stop_requested"), "the stop is recorded"
    assert "Traceback" not in log_text(root)
    return end


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_signal_during_an_outage_stops_at_once(tmp_path, scripted_server, sig):
    server = scripted_server(
        [Reply("Looking.", [("list_dir", {"path": "."})]), Fault("outage", seconds=60)]
    )
    config = parts_project(tmp_path, server.base_url)
    process = start_forked(tmp_path, "run", "--config", str(config))
    try:
        wait_for(lambda: logged(tmp_path, "retry"), "a retry (connection refused)", process)
        elapsed = stop_and_time(process, sig)
    finally:
        kill(process)
    end = check_stopped(tmp_path, process, elapsed, sig=sig)
    assert of_type(run_events(tmp_path), "stop_requested")[0]["signal"] == sig.name
    assert "ouroboros resume" in end["next"]


@pytest.mark.parametrize(
    "act",
    [Status(status=503, text='{"error": {"message": "loading"}}'), Trickle(interval=0.2)],
    ids=["503", "trickle"],
)
def test_a_signal_while_the_server_answers_503_or_trickles_stops_at_once(tmp_path, act):
    server = start_server([act], repeat=True)
    try:
        config = parts_project(tmp_path, server.base_url)
        process = start_forked(tmp_path, "run", "--config", str(config))
        try:
            wait_for(lambda: server.chat_requests(), "the first request", process)
            wait_for(lambda: logged(tmp_path, "session_start"), "the run to start", process)
            if isinstance(act, Status):
                wait_for(lambda: logged(tmp_path, "retry"), "a retry", process)
            elapsed = stop_and_time(process, signal.SIGTERM)
        finally:
            kill(process)
    finally:
        server.stop()
    check_stopped(tmp_path, process, elapsed)
    assert not logged(tmp_path, "assistant"), "the cut reply is asked again on resume"


@pytest.mark.parametrize("gap", [0.0, 0.02, 0.2])
def test_a_long_tool_call_is_killed_and_recorded_and_a_second_signal_keeps_exit_130(
    tmp_path, scripted_server, gap
):
    server = scripted_server(PartsAgent(3, hold_part=1))
    config = parts_project(tmp_path, server.base_url)
    launch = start if gap == 0.2 else start_forked  # one whole new `python -m ouroboros`
    process = launch(tmp_path, "run", "--config", str(config))
    try:
        group = held_pid(tmp_path, process)
        signals = (signal.SIGINT, signal.SIGINT) if gap else (signal.SIGINT,)
        elapsed = stop_and_time(process, *signals, gap=gap)
    finally:
        kill(process)
    # a second signal during the first one's clean-up ends it at once (interrupted_now);
    # after the end is recorded it changes nothing
    end = check_stopped(
        tmp_path,
        process,
        elapsed,
        ("interrupted", "interrupted_now") if gap else ("interrupted",),
        sig=signal.SIGINT,
    )
    assert not live_members(group), "the command's process group is gone"
    results = logged(tmp_path, "tool_result")
    assert results[-1]["interrupted"] is True and results[-1]["name"] == "shell_exec"
    assert end["total_turns"] == 1


def live_members(group: int) -> list[int]:
    """Processes of a process group that are still running (zombies are dead already)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members
