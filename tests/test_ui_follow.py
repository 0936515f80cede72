"""Following a log that another process is writing."""

from __future__ import annotations

from pathlib import Path

import pytest

from ouroboros.errors import StateError
from ouroboros.store import events as ev
from ouroboros.store.log import last_records
from ouroboros.ui.follow import follow_events, follow_run

WINDOW = {"context_limit": 8192, "limit_source": "config", "budget": 6144}
EVENTS = {
    "run_start": ev.RunStart(run_id="r1", version="0.1.0", pid=1, config={}),
    "session_start": ev.SessionStart(**WINDOW, carryover_messages=0),
    "assistant": ev.Assistant(text="Working.", finish_reason="stop", tool_calls=[]),
    "run_end": ev.RunEnd(reason="max_turns", exit_code=0, sessions=1, total_turns=1, restarts=0),
    "run_resumed": ev.RunResumed(
        total_turns=1, restarts=0, torn_line_dropped=False, interrupted_tools=[], **WINDOW
    ),
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
    path.write_bytes(
        record("run_start", 1)
        + record("run_end", 2)
        + record("run_resumed", 3)
        + record("run_end", 4)
    )

    assert [e.seq for e in follow_events(path, never)] == [1, 2, 3, 4]


def test_records_the_caller_has_shown_are_passed_over_unparsed(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    unfit = b'{"type": "assistant", "seq": 2, "text": 5}\n'  # would be a damaged log if parsed
    path.write_bytes(record("run_start", 1) + unfit + record("run_end", 3))

    assert [e.seq for e in follow_events(path, never, after_seq=2)] == [3]
    with pytest.raises(StateError):
        list(follow_events(path, never))


def test_an_ended_log_shown_already_ends_the_follow(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(record("run_start", 1) + record("run_end", 2))

    assert list(follow_events(path, never, after_seq=2)) == []


def test_a_line_that_is_not_json_is_skipped(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(record("run_start", 1) + b'{"type": "assis\n' + record("run_end", 3))

    assert [e.seq for e in follow_events(path, never)] == [1, 3]


def test_a_log_cut_short_by_resume_is_read_on_from_its_new_end(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    whole = record("run_start", 1)
    path.write_bytes(whole + b'{"type": "tool_')
    contents = [
        whole,  # resume drops the torn line
        whole + record("run_resumed", 2) + record("run_end", 3),
    ]

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


# -- the last events (`logs -n N`, and where `logs -f` starts) --

RUN = ["run_start", "session_start", "assistant", "assistant", "assistant", "run_end"]


def write_run(run_dir: Path, types: list[str], torn: bytes = b"") -> Path:
    run_dir.mkdir(exist_ok=True)
    path = run_dir / "events.jsonl"
    path.write_bytes(b"".join(record(type, seq) for seq, type in enumerate(types, 1)) + torn)
    return run_dir


@pytest.mark.parametrize("count", [0, 1, 2, 5, 6, 50])
def test_the_last_events_are_those_a_full_read_ends_with(tmp_path, count):
    run_dir = write_run(tmp_path / "run", RUN)

    expected = [1, 2, 3, 4, 5, 6][-count:] if count else []
    assert [r["seq"] for r in last_records(run_dir, count)] == expected


def test_the_last_events_leave_out_a_line_still_being_written(tmp_path):
    run_dir = write_run(tmp_path / "run", RUN[:5], torn=record("run_end", 6)[:12])

    assert [r["seq"] for r in last_records(run_dir, 2)] == [4, 5]


def test_following_from_the_tail_shows_only_what_comes_after_it(tmp_path):
    run_dir = write_run(tmp_path / "run", RUN[:4])
    appends = [record("assistant", 5) + record("run_end", 6)]

    def wait() -> None:
        with (run_dir / "events.jsonl").open("ab") as log:
            log.write(appends.pop(0))

    assert [e.seq for e in follow_run(run_dir, newest=1, wait=wait)] == [4, 5, 6]


def test_following_a_run_that_has_ended_stops_at_its_tail(tmp_path):
    run_dir = write_run(tmp_path / "run", RUN)

    assert [e.seq for e in follow_run(run_dir, newest=0, wait=never)] == []


# -- a resume's dashboard, caught up with the run --


def test_a_resumed_dashboard_catches_up_with_the_current_segment(tmp_path):
    from ouroboros.ui.dashboard import DashboardState
    from ouroboros.ui.live import resumed_state

    run_dir = write_run(tmp_path / "run", RUN[:5])

    state = resumed_state(DashboardState(), run_dir)

    assert state.total_turns == 3  # the three assistant records of the current segment


@pytest.mark.parametrize("damage", ["missing", "damaged"])
def test_a_resumed_dashboard_of_a_log_it_cannot_read_starts_afresh(tmp_path, damage):
    from ouroboros.ui.dashboard import DashboardState
    from ouroboros.ui.live import resumed_state

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    if damage == "damaged":
        (run_dir / "events.jsonl").write_bytes(b"not json\n" + record("run_end", 2))

    state = resumed_state(DashboardState(), run_dir)  # no traceback: the resume says why

    assert state.run_id == "" and state.total_turns == 0
