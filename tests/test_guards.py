"""The guards of an unattended run: the stuck-loop detector's pure functions, its escalation
(a note, then a pause), idle pauses, and the restart-storm brake's cause. The session tests
for them are in test_unattended.py."""

from __future__ import annotations

import json

import pytest

from ouroboros.config import AgentConfig
from ouroboros.loop.guards import (
    Step,
    StuckGuard,
    barren_cause,
    find_loop,
    idle_pause,
    step_of,
)
from ouroboros.protocols import ToolCall, ToolResult

THRESHOLDS = AgentConfig(stuck_repeats=4, stuck_cycles=3)


def step(text: str = "", *outcomes: tuple[str, dict, str, bool]) -> Step:
    """A step from (tool, arguments, result text, ok) outcomes."""
    return step_of(
        text,
        [
            (ToolCall(f"id{i}", name, json.dumps(args)), ToolResult(out, ok=ok))
            for i, (name, args, out, ok) in enumerate(outcomes)
        ],
    )


MISSING = ("file_read", {"path": "data/part_000.txt"}, "error: file not found", False)
LISTING = ("list_dir", {"path": "."}, "data/\nnotes.md", True)
READ_OK = ("file_read", {"path": "notes.md"}, "the notes", True)


def test_the_same_failing_call_n_times_is_a_repeat_loop():
    steps = [step(f"try {i}", MISSING) for i in range(4)]  # the text may change

    loop = find_loop(steps, repeats=4, cycles=3)

    assert loop is not None and loop.kind == "repeat" and loop.steps == 4
    assert 'file_read({"path": "data/part_000.txt"})' in loop.detail
    assert "error: file not found" in loop.detail
    assert find_loop(steps[:3], repeats=4, cycles=3) is None


def test_arguments_are_compared_as_json_not_as_text():
    same = ToolCall("a", "file_read", '{"path": "x", "offset": 1}')
    reordered = ToolCall("b", "file_read", '{"offset":1,"path":"x"}')
    failed = ToolResult("error: no", ok=False)
    steps = [step_of("", [(c, failed)]) for c in (same, reordered, same, reordered)]
    assert find_loop(steps, repeats=4, cycles=0) is not None


@pytest.mark.parametrize(
    "steps",
    [
        [step("", MISSING)] * 3 + [step("", ("file_read", {"path": "other"}, "error: x", False))],
        [step("", MISSING)] * 3
        + [
            step(
                "", ("file_read", {"path": "data/part_000.txt"}, "error: permission denied", False)
            )
        ],
        [step("", READ_OK)] * 3 + [step("x", READ_OK)],
    ],
    ids=["other arguments", "other result", "a call that works"],
)
def test_a_different_call_or_result_or_success_is_no_repeat(steps):
    assert find_loop(steps, repeats=4, cycles=0) is None


def test_two_steps_taking_turns_are_a_cycle():
    a, b = step("look", LISTING), step("read", READ_OK)

    loop = find_loop([a, b] * 3, repeats=4, cycles=3)

    assert loop is not None and loop.kind == "cycle" and loop.steps == 6
    assert "list_dir" in loop.detail and "file_read" in loop.detail
    assert find_loop([a, b] * 2 + [a], repeats=4, cycles=3) is None
    assert find_loop([a, b, a, step("", MISSING), a, b], repeats=4, cycles=3) is None


def test_the_same_reply_with_nothing_new_is_an_echo():
    said = step("I will now finish the report.")
    loop = find_loop([said] * 4, repeats=4, cycles=3)
    assert loop is not None and loop.kind == "echo"
    # New text each time is an agent writing, not a loop.
    assert find_loop([step(f"Chapter {i}.") for i in range(8)], repeats=4, cycles=3) is None


def test_zero_turns_a_check_off():
    assert find_loop([step("", MISSING)] * 10, repeats=0, cycles=0) is None


def test_the_guard_notes_a_loop_then_pauses_when_it_goes_on():
    guard = StuckGuard(lambda: THRESHOLDS)
    alarms = [guard.observe(step("", MISSING)) for _ in range(8)]

    assert [a is not None for a in alarms] == [False] * 3 + [True] + [False] * 3 + [True]
    assert alarms[3].pause is False and alarms[7].pause is True


def test_progress_after_the_note_forgives_the_loop():
    guard = StuckGuard(lambda: THRESHOLDS)
    for _ in range(4):
        guard.observe(step("", MISSING))
    assert guard.warned is not None

    guard.observe(step("", READ_OK))  # a call that worked, with a result not seen before

    assert guard.warned is None
    alarms = [guard.observe(step("", MISSING)) for _ in range(4)]
    assert alarms[-1] is not None and alarms[-1].pause is False  # a note again, not a pause


def test_a_cycle_is_stopped_within_twelve_calls():
    guard = StuckGuard(lambda: THRESHOLDS)
    a, b = step("", LISTING), step("", READ_OK)
    alarms = [guard.observe(s) for s in [a, b] * 6]
    assert alarms[5] is not None and not alarms[5].pause
    assert alarms[11] is not None and alarms[11].pause


def test_new_text_is_told_from_a_repeated_reply():
    guard = StuckGuard(lambda: THRESHOLDS)
    assert not guard.new_text("") and not guard.new_text("  \n")
    assert guard.new_text("Chapter one.")
    guard.observe(step("Chapter one."))
    assert not guard.new_text("Chapter  one.\n")  # the same, spaced differently
    assert guard.new_text("Chapter two.")


def test_idle_pauses_grow_to_the_configured_cap_and_zero_means_none():
    assert [idle_pause(n) for n in range(1, 9)] == [0, 2, 4, 8, 16, 32, 60, 60]
    assert [idle_pause(n, 5.0) for n in range(1, 6)] == [0, 2, 4, 5, 5]
    assert [idle_pause(n, 0.0) for n in range(1, 6)] == [0, 0, 0, 0, 0]


def test_the_restart_storm_names_the_agent_when_the_window_is_not_to_blame():
    failing = barren_cause(turns=30, calls=30, failed=30, top_failure="file_read x, 30 times")
    assert failing is not None and failing.startswith("every tool call failed: 30 of 30")
    assert "file_read x" in failing
    silent = barren_cause(turns=12, calls=0, failed=0, top_failure="")
    assert silent == "the agent made no tool call in 12 turns"
    assert barren_cause(turns=1, calls=0, failed=0, top_failure="") is None  # the window


def test_new_text_forgives_an_echo_but_not_a_failing_call_with_new_words():
    guard = StuckGuard(lambda: THRESHOLDS)
    for _ in range(4):
        guard.observe(step("The end."))
    guard.observe(step("Chapter two begins."))  # writing again
    assert guard.warned is None

    for _ in range(4):
        guard.observe(step("", MISSING))
    alarms = [guard.observe(step(f"attempt {i}", MISSING)) for i in range(4)]
    assert alarms[-1] is not None and alarms[-1].pause  # new words, the same failing call
