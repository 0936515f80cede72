"""The dashboard's header: the window beside the budget, with where its size came from; an
error alert that goes when the run it failed is resumed."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from ouroboros.store import events as ev
from ouroboros.ui.render import render
from tests.test_ui_dashboard import rendered_at, replay, sample_events
from tests.ui_sample import sample_resumed


@pytest.mark.parametrize(
    "width,height,label",
    [
        (80, 24, "window 8,192"),
        (120, 30, "window 8,192 (server /api/show)"),
        (160, 50, "budget 6,144 of window 8,192 (server /api/show)"),
    ],
)
def test_the_header_shows_the_window_and_where_its_size_came_from(
    tmp_path: Path, width, height, label
):
    frame = rendered_at(replay(sample_events(tmp_path)), width, height)

    header = frame[: next(i for i, line in enumerate(frame) if line.startswith("╰"))]
    assert any(line.rstrip(" │").endswith(label) for line in header), "\n".join(header)
    assert any("/6,144 tokens" in line for line in header)  # the budget, beside it
    assert max(len(line) for line in frame) <= width


def test_an_error_alert_goes_when_the_failed_run_is_resumed(tmp_path: Path):
    state = replay(sample_events(tmp_path))
    state.apply(
        ev.ErrorEvent(
            message="the server went away",
            kind="X",
            seq=90,
            ts="2025-03-01T10:20:00.000Z",
            session=2,
            turn=3,
        )
    )
    assert state.alert is not None

    state.apply(sample_resumed(seq=91, ts="2025-03-01T10:21:00.000Z", session=2, turn=3))

    assert state.alert is None


# -- waiting, with the time it has taken --


def mid_run(tmp_path: Path):
    return replay(sample_events(tmp_path, ended=False))


def at(ts: str, seconds: int):
    from datetime import timedelta

    from ouroboros.ui.dashboard import parse_ts

    return parse_ts(ts) + timedelta(seconds=seconds)


def test_a_run_waiting_for_the_model_says_for_how_long(tmp_path: Path):
    state = mid_run(tmp_path)
    assert state.waiting() is not None and state.waiting()[0] == "waiting for the model"
    console = Console(record=True, width=80, height=24)

    console.print(render(state, 80, 24, now=at(state.last_ts, 75)))
    frame = console.export_text()

    assert "waiting for the model 1m15s ─╯" in frame
    assert "assistant (last reply; waiting for the model 1m15s)" in frame


def test_a_streaming_or_ended_run_waits_on_nothing(tmp_path: Path):
    state = replay(sample_events(tmp_path, ended=True))
    assert state.waiting() is None
    running = mid_run(tmp_path)
    running.add_text("Hel", 1.0)
    assert running.waiting() is None


def test_a_tool_still_running_and_an_idle_pause_are_waits_of_their_own(tmp_path: Path):
    state = mid_run(tmp_path)
    envelope = {"session": 2, "turn": 4, "ts": "2025-03-01T10:30:00.000Z"}
    state.apply(
        ev.ToolCallEvent(
            id="c9", name="shell_exec", arguments='{"command": "make"}', seq=95, **envelope
        )
    )
    assert state.waiting() == ("running shell_exec", envelope["ts"])
    state.apply(
        ev.ToolResultEvent(
            id="c9",
            name="shell_exec",
            ok=True,
            bytes=3,
            observation="obs-9",
            summary="ok",
            duration_ms=5,
            truncated=False,
            seq=96,
            **envelope,
        )
    )
    state.apply(ev.Idle(idle_turns=1, pause_secs=2.0, max_idle_turns=3, seq=97, **envelope))

    assert state.waiting() == ("idle pause", envelope["ts"])
    assert "no tool call in 1 turn in a row" in state.notes[-1].text  # in the activity pane


@pytest.mark.parametrize("width,height", [(80, 24), (100, 30), (160, 50)])
def test_the_runs_end_line_wraps_in_the_activity_pane_never_cut(tmp_path: Path, width, height):
    state = replay(sample_events(tmp_path, ended=False))
    then = (
        'the agent said it is done ("ALL DONE") without calling task_complete, so the run '
        'is paused; to give it more to do: ouroboros resume --message "what to do next"'
    )
    state.apply(
        ev.RunEnd(
            reason="idle",
            exit_code=0,
            sessions=2,
            total_turns=9,
            restarts=1,
            next=then,
            seq=99,
            ts="2025-03-01T10:30:00.000Z",
            session=2,
            turn=3,
        )
    )

    frame = rendered_at(state, width, height)

    activity = frame[next(i for i, line in enumerate(frame) if "╭─ activity" in line) :]
    flat = " ".join(
        " ".join(
            line.strip("│ ").split()[1:]
            if line.strip("│ ")[:2].isdigit()
            else line.strip("│ ").split()
        )
        for line in activity[1:-1]
    )
    assert then in flat, "\n".join(activity)
    assert len(frame) <= height and max(len(line) for line in frame) <= width


def test_the_header_names_the_model_the_server_serves_where_it_is_not_the_one_asked(tmp_path):
    from ouroboros.testing import Reply, ScriptedServer
    from tests.helpers import make_project, ouroboros_here, run_events

    served = "qwen2.5-7b-instruct-q4_k_m.gguf"
    replies = [Reply("", [("task_complete", {"summary": "done"})])]
    with ScriptedServer(replies, model=served, serves_any_name=True) as server:
        config = make_project(tmp_path, server.base_url)  # model.name = "scripted"
        result = ouroboros_here("run", "-c", str(config), "--headless")
    assert result.returncode == 0, result.stderr

    events = run_events(tmp_path)
    header = rendered_at(replay(events), 80, 24)[0]

    assert f" · {served} " in header and "scripted" not in header
    [usage] = [e for e in events if e["type"] == "token_usage"]
    assert usage["served_model"] == served


def test_the_header_names_model_name_when_the_server_serves_that(tmp_path: Path):
    header = rendered_at(replay(sample_events(tmp_path)), 80, 24)[0]

    assert " · qwen3:8b " in header
