"""Following a log that another process is writing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ouroboros.ui.follow import follow_events


def record(type: str, seq: int) -> bytes:
    return json.dumps({"type": type, "ts": "2025-03-01T10:00:00.000Z", "seq": seq,
                       "session": 1, "turn": 0}).encode() + b"\n"


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

    types = [e["type"] for e in follow_events(path, wait)]

    assert types == ["run_start", "session_start", "assistant", "run_end"]
    assert not appends


def test_a_run_end_that_something_follows_is_not_the_end(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(record("run_start", 1) + record("run_end", 2) + record("run_resumed", 3)
                     + record("run_end", 4))

    assert [e["seq"] for e in follow_events(path, never)] == [1, 2, 3, 4]


def test_a_line_that_is_not_json_is_skipped(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(record("run_start", 1) + b'{"type": "assis\n' + record("run_end", 3))

    assert [e["seq"] for e in follow_events(path, never)] == [1, 3]


def test_a_log_cut_short_by_resume_is_read_on_from_its_new_end(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    whole = record("run_start", 1)
    path.write_bytes(whole + b'{"type": "tool_')
    contents = [whole,  # resume drops the torn line
                whole + record("run_resumed", 2) + record("run_end", 3)]

    def wait() -> None:
        path.write_bytes(contents.pop(0))

    assert [e["seq"] for e in follow_events(path, wait)] == [1, 2, 3]


def test_interrupting_the_wait_ends_the_follow(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(record("run_start", 1))

    def wait() -> None:
        raise KeyboardInterrupt

    events = follow_events(path, wait)
    assert next(events)["seq"] == 1
    with pytest.raises(KeyboardInterrupt):
        next(events)
