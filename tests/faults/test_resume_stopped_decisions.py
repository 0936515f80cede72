"""The pure decisions behind continuing a stopped run: the flags a resume runs with, when it
must be told more, the line a run ends with, and the idle back-off."""

from __future__ import annotations

import pytest

from ouroboros.loop.continuation import (
    flags_to_remember,
    how_to_continue,
    refusal,
    resume_flags,
)
from ouroboros.loop.guards import idle_pause
from ouroboros.store import events as ev
from ouroboros.store.summary import RunSummary


def test_only_flags_are_remembered_and_never_a_password():
    config = {
        "agent": {"workspace": "/w", "max_turns": 3},
        "model": {"name": "m", "base_url": "http://u:pw@h:1"},
    }
    sources = {
        "agent.workspace": "flag",
        "agent.max_turns": "project file x",
        "model.base_url": "flag",
        "model.name": "flag",
    }
    assert flags_to_remember(config, sources) == {"agent.workspace": "/w", "model.name": "m"}


def test_the_latest_start_or_resume_says_what_was_remembered_but_the_limit_is_runs():
    start = ev.RunStart(run_id="r1", version="0.1.0", pid=1, config={})
    reply = ev.Assistant(text="", finish_reason="stop", tool_calls=[])
    resumed = ev.RunResumed(
        total_turns=2,
        restarts=0,
        torn_line_dropped=False,
        interrupted_tools=[],
        context_limit=8192,
        limit_source="config",
        budget=6144,
        flags={"agent.max_turns": 8, "model.name": "m2"},
    )
    events = [
        start.model_copy(update={"flags": {"agent.max_turns": 3}}),
        reply,
        reply,
        resumed,
        reply,
    ]
    assert folded(events).flags == {"agent.max_turns": 3, "model.name": "m2"}
    assert folded(events).assistants == 3
    assert folded([start]).flags == {}  # a log from before flags
    assert folded([start, resumed]).flags == {"model.name": "m2"}


def folded(events: list[ev.EventBase]) -> RunSummary:
    """What a reader of the log knows of these events: their summary, as resume reads it."""
    summary = RunSummary()
    for seq, event in enumerate(events, 1):
        summary.add_record({**event.record(), "seq": seq})
    return summary


@pytest.mark.parametrize(
    "remembered,given,more,expected",
    [
        ({"agent.max_turns": 3}, {}, None, {"agent.max_turns": 3}),
        ({"agent.max_turns": 3}, {}, 5, {"agent.max_turns": 12}),
        ({"agent.max_turns": 3}, {}, 0, {"agent.max_turns": 0}),
        ({"model.name": "a"}, {"model.name": "b"}, None, {"model.name": "b"}),
    ],
)
def test_resume_flags(remembered, given, more, expected):
    assert resume_flags(remembered, given, more_turns=more, total_turns=7) == expected


def end(reason: str, summary: str = "") -> ev.RunEnd:
    return ev.RunEnd(
        reason=reason, exit_code=0, sessions=1, total_turns=3, restarts=0, summary=summary
    )


def test_a_resume_that_would_stop_at_once_says_what_to_give_it():
    assert "--max-turns N" in refusal("r1", None, total_turns=3, max_turns=3, message="")
    assert refusal("r1", None, total_turns=3, max_turns=4, message="") is None
    complete = end("task_complete", summary="all done")
    why = refusal("r1", complete, total_turns=3, max_turns=0, message=" ")
    assert "is complete (task_complete: all done)" in why and "--message" in why
    assert refusal("r1", complete, total_turns=3, max_turns=0, message="more") is None
    for reason in ("interrupted", "interrupted_now", "idle", "error", "max_restarts"):
        assert refusal("r1", end(reason), total_turns=3, max_turns=0, message="") is None


@pytest.mark.parametrize(
    "reason,says",
    [
        ("task_complete", 'ouroboros resume --message "what to do next"'),
        ("idle", "no tool call and said nothing new in 3 turns in a row, so the run is paused"),
        ("stuck", "stuck in a loop (see the `stuck` event), so the run is paused"),
        ("max_turns", "`ouroboros resume --max-turns N` gives it N more"),
        ("interrupted", "`ouroboros resume` continues the run"),
        ("error", "fix the cause"),
    ],
)
def test_every_end_says_how_to_continue(reason, says):
    assert says in how_to_continue(reason, max_turns=5, max_idle_turns=3)


def test_the_idle_pause_grows_and_is_capped():
    assert [idle_pause(n) for n in range(1, 8)] == [0, 2, 4, 8, 16, 32, 60]
    assert idle_pause(10_000) == 60
