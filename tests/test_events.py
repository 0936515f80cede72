"""The event models: the log's records as the harness writes them and every reader parses
them, old logs (format 1) read back, and the manual's event table (docs/event-log.md) made
from the models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ouroboros.errors import StateError
from ouroboros.store import events as ev
from ouroboros.store.event_table import TABLE_BEGIN, TABLE_END, marked_table
from ouroboros.store.log import EventLog, read_events, read_log
from ouroboros.ui.dashboard import DashboardState
from ouroboros.ui.plain import describe, format_any
from ouroboros.ui.stats import run_stats
from tests.ui_sample import write_sample_run

V1_LOG = Path(__file__).with_name("events_v1.jsonl")  # written by Ouroboros 0.1 (format 1)
EVENT_PAGE = Path(__file__).parents[1] / "docs" / "event-log.md"

# Records of format 1 from before some fields were added: they read with those left at their
# defaults.
EARLY_V1 = [
    {
        "type": "run_start",
        "ts": "2025-01-01T00:00:00.000Z",
        "seq": 1,
        "session": 1,
        "turn": 0,
        "format_version": 1,
        "run_id": "r1",
        "version": "0.0.1",
        "pid": 7,
        "config": {},
    },
    {
        "type": "token_usage",
        "ts": "2025-01-01T00:00:01.000Z",
        "seq": 2,
        "session": 1,
        "turn": 1,
        "prompt_tokens": 900,
        "completion_tokens": 20,
        "total_tokens": 920,
        "context_limit": 4096,
        "budget": 3584,
        "context_used_pct": 25.1,
        "source": "estimate",
    },
    {
        "type": "session_restart",
        "ts": "2025-01-01T00:00:02.000Z",
        "seq": 3,
        "session": 2,
        "turn": 0,
        "previous_turns": 4,
        "carryover_messages": 5,
        "reason": "context full",
    },
    {
        "type": "run_end",
        "ts": "2025-01-01T00:00:03.000Z",
        "seq": 4,
        "session": 2,
        "turn": 0,
        "reason": "max_turns",
        "exit_code": 0,
        "sessions": 2,
        "total_turns": 4,
        "restarts": 1,
    },
]


def v1_records() -> list[dict]:
    return [json.loads(line) for line in V1_LOG.read_text().splitlines()]


def test_a_format_1_log_reads_back_as_it_was_written():
    records = v1_records()
    events = read_log(V1_LOG)

    assert {record["type"] for record in records} == set(ev.EVENT_TYPES)
    assert [type(event) for event in events] == [ev.EVENT_MODELS[r["type"]] for r in records]
    assert [event.record() for event in events] == records  # no field added, none lost
    assert [list(event.record()) for event in events] == [list(r) for r in records]


def test_records_from_before_a_field_was_added_read_with_its_default():
    start, usage, restart, end = map(ev.parse_event, EARLY_V1)

    assert start.flags == {} and start.sandbox is None
    assert (usage.verdict, usage.reported, usage.cached_tokens) == (None, None, None)
    assert (restart.carryover_masked, restart.carryover_turns_dropped) == (0, 0)
    assert (end.resumable, end.next, end.summary) == (False, "", "")
    stats = run_stats(EARLY_V1)
    assert (stats.run_id, stats.restarts, stats.end) == ("r1", 1, "max_turns")


def test_the_log_writes_each_model_as_todays_record(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    log = EventLog(path, seq=4, session=2, turn=3)
    told: list[ev.EventBase] = []
    log.subscribe(told.append)
    log.emit(
        ev.ToolResultEvent(
            id="c1",
            name="file_read",
            ok=True,
            bytes=5,
            observation="obs-1",
            truncated=False,
            summary="KEY",
            duration_ms=2,
        )
    )
    log.emit(ev.WindDown(context_used_pct=91.0))
    log.emit(
        ev.TokenUsage(
            prompt_tokens=1,
            completion_tokens=2,
            total_tokens=3,
            context_limit=8,
            budget=6,
            context_used_pct=16.7,
            source="server",
            reported=None,
            cached_tokens=None,
            verdict="unknown",
        )
    )
    log.close()

    result, wind_down, usage = read_events(path).events
    assert list(result)[:5] == ["type", "ts", "seq", "session", "turn"]
    assert (result["seq"], result["session"], result["turn"]) == (5, 2, 3)
    assert "interrupted" not in result and "checkpoint" not in result  # left out at default
    assert "reason" not in wind_down
    assert usage["cached_tokens"] is None and usage["reported"] is None  # written as null
    assert [event.seq for event in told] == [5, 6, 7] and told[0].ts == result["ts"]


def test_a_type_this_version_does_not_know_is_kept_and_skipped():
    future = {
        "type": "hologram",
        "ts": "2030-01-01T00:00:00.000Z",
        "seq": 9,
        "session": 1,
        "turn": 2,
        "colour": "teal",
    }
    event = ev.parse_event(future)

    assert isinstance(event, ev.UnknownEvent) and event.record() == future
    assert describe(event) is None
    assert format_any(future) == "00:00:00 s1 t2 hologram colour=teal"
    state = DashboardState().apply(future)
    assert state.last_type == "hologram" and not state.notes
    assert run_stats([future]).context_pcts == []


def test_a_record_that_does_not_fit_its_type_is_a_damaged_log(tmp_path: Path):
    bad = {
        "type": "tool_result",
        "ts": "2025-01-01T00:00:00.000Z",
        "seq": 3,
        "session": 1,
        "turn": 1,
        "id": "c1",
        "name": "file_read",
        "ok": True,
    }
    with pytest.raises(
        ev.EventError,
        match=r"event 3 \(tool_result\) does not fit its type: "
        r"bytes: Field required",
    ):
        ev.parse_event(bad)
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(StateError, match=f"{path} is damaged: event 3"):
        read_log(path)


def test_every_sample_record_the_ui_tests_replay_fits_its_model(tmp_path: Path):
    records = read_events(write_sample_run(tmp_path)).events

    for record in records:
        event = ev.parse_event(record)
        assert not isinstance(event, ev.UnknownEvent), record
        assert event.record() == record


def test_every_type_but_the_bookkeeping_ones_has_a_line_of_its_own():
    quiet = {event.type for event in read_log(V1_LOG) if describe(event) is None}
    assert quiet == {"checkpoint", "session_end"}


def test_the_manuals_event_table_is_the_one_the_models_make():
    text = EVENT_PAGE.read_text(encoding="utf-8")
    begin, end = text.find(TABLE_BEGIN), text.find(TABLE_END)
    in_docs = text[begin : end + len(TABLE_END) + 1] if begin >= 0 and end >= 0 else "(no table)"

    assert in_docs == marked_table(), (
        "docs/event-log.md's event table differs from the event models "
        "(ouroboros/store/events.py): "
        "replace it, markers included, with the output of `python -m ouroboros.store.event_table`"
    )


@pytest.mark.parametrize(
    "event,line",
    [
        (
            ev.RunEnd(reason="max_turns", exit_code=0, sessions=1, total_turns=1, restarts=1),
            "run ended: max_turns after 1 turn, 1 session, 1 restart (exit 0)",
        ),
        (
            ev.RunEnd(reason="max_turns", exit_code=0, sessions=2, total_turns=0, restarts=0),
            "run ended: max_turns after 0 turns, 2 sessions, 0 restarts (exit 0)",
        ),
        (
            ev.ContextDrop(turns_dropped=1, tokens_after=10),
            "dropped the oldest turn to fit the window",
        ),
        (
            ev.SessionRestart(previous_turns=1, carryover_messages=1, reason="r"),
            "restart -> session 1: r (previous session ran 1 turn, 1 message carried)",
        ),
    ],
)
def test_a_count_of_one_is_singular(event, line):
    assert describe(event) == line
