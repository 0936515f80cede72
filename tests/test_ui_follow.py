"""Following a log that another process is writing."""

from __future__ import annotations

from pathlib import Path

import pytest

from ouroboros.store import events as ev
from ouroboros.errors import StateError
from ouroboros.ui.follow import follow_events


WINDOW = {"context_limit": 8192, "limit_source": "config", "budget": 6144}
EVENTS = {
    "run_start": ev.RunStart(run_id="r1", version="0.1.0", pid=1, config={}),
    "session_start": ev.SessionStart(**WINDOW, carryover_messages=0),
    "assistant": ev.Assistant(text="Working.", finish_reason="stop", tool_calls=[]),
    "run_end": ev.RunEnd(reason="max_turns", exit_code=0, sessions=1, total_turns=1,
                         restarts=0),
    "run_resumed": ev.RunResumed(total_turns=1, restarts=0, torn_line_dropped=False,
                                 interrupted_tools=[], **WINDOW),
}


def record(type: str, seq: int) -> bytes:
    event = EVENTS[type].model_copy(update={"ts": "2025-03-01T10:00:00.000Z", "seq": seq})
    return event.to_json().encode() + b"\n"


def never() -> None:
    raise AssertionError("waited for more, but the log was complete")


def test_a_torn_last_line_waits_until_it_is_whole(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    third = record("assistant", 3)
    path.write_bytes(record("run_start", 1) + record("session_start", 2) + third[:10])
    appends = [third[10:], b"", record("run_end", 4)]

    def wait() -> None:
        with path.open("ab") as f:
            f.write(appends.pop(0))

    types = [e.type for e in follow_events(path, wait)]

    assert types == ["run_start", "session_start", "assistant", "run_end"]
    assert not appends


def test_a_run_end_that_something_follows_is_not_the_end(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(record("run_start", 1) + record("run_end", 2) + record("run_resumed", 3)
                     + record("run_end", 4))

    assert [e.seq for e in follow_events(path, never)] == [1, 2, 3, 4]


def test_a_line_that_is_not_json_is_skipped(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(record("run_start", 1) + b'{"type": "assis\n' + record("run_end", 3))

    assert [e.seq for e in follow_events(path, never)] == [1, 3]


def test_a_log_cut_short_by_resume_is_read_on_from_its_new_end(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    whole = record("run_start", 1)
    path.write_bytes(whole + b'{"type": "tool_')
    contents = [whole,  # resume drops the torn line
                whole + record("run_resumed", 2) + record("run_end", 3)]

    def wait() -> None:
        path.write_bytes(contents.pop(0))

    assert [e.seq for e in follow_events(path, wait)] == [1, 2, 3]


def test_interrupting_the_wait_ends_the_follow(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(record("run_start", 1))

    def wait() -> None:
        raise KeyboardInterrupt

    events = follow_events(path, wait)
    assert next(events).seq == 1
    with pytest.raises(KeyboardInterrupt):
        next(events)


def test_a_record_that_does_not_fit_its_type_names_the_log(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(record("run_start", 1) + b'{"type": "run_end", "seq": 2}\n')

    events = follow_events(path, never)
    assert next(events).seq == 1
    with pytest.raises(StateError, match=f"{path} is damaged: event 2 \\(run_end\\)"):
        next(events)
