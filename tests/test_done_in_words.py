"""A model that says it is done in words but never calls task_complete (most small local
models end this way): the run pauses as an idle one does, and its end reads as done, with a
line telling how to go on, without pretending task_complete was called."""

from __future__ import annotations

import pytest

from ouroboros.loop.continuation import how_to_continue, said_done
from ouroboros.protocols import Message
from ouroboros.testing import Reply
from tests.helpers import clean_env, make_project, ouroboros_here, run_events


@pytest.mark.parametrize(
    "text,words",
    [
        ("ALL DONE. Every part is recorded.", "ALL DONE"),
        ("I think the task is complete now.", "the task is complete"),
        ("I have finished the task: see results.txt", "I have finished the task"),
        ("The task is not complete yet: part 3 is missing.", None),
        ("Done with part 2; reading part 3 next.", None),
        ("Parts 1 to 2 are done; I think that is all for now.", None),
    ],
)
def test_what_counts_as_saying_done(text, words):
    assert said_done(text) == words


def test_an_idle_end_after_saying_done_says_so_and_how_to_go_on():
    line = how_to_continue("idle", max_idle_turns=2, last_words="ALL DONE!")
    plain = how_to_continue("idle", max_idle_turns=2, last_words="Still thinking.")

    assert line == (
        'the agent said it is done ("ALL DONE") without calling task_complete, so '
        "the run is paused; to give it more to do: ouroboros resume --message "
        '"what to do next"'
    )
    assert plain.startswith("the agent made no tool call and said nothing new in 2 turns in a row")


def says_done(messages: list[Message]) -> Reply:
    if not any(m["role"] == "assistant" for m in messages):
        return Reply("Recording the part.", [("shell_exec", {"command": "echo 1 >> parts.txt"})])
    return Reply("ALL DONE. Every part is in parts.txt.")


def test_a_run_whose_agent_says_done_in_words_ends_reading_as_done(tmp_path, scripted_server):
    server = scripted_server(says_done)
    config = make_project(tmp_path, server.base_url, agent={"max_idle_turns": 1})

    result = ouroboros_here("run", "--config", str(config), "--headless")
    watched = ouroboros_here("watch", "--config", str(config), env=clean_env(COLUMNS="120"))

    assert result.returncode == 3, result.stderr  # paused, as idle is
    end = run_events(tmp_path)[-1]
    assert end["reason"] == "idle" and not end.get("summary")  # not task_complete
    assert end["said_done"] == "ALL DONE"  # the loop's judgement, which every reader reads
    assert 'the agent said it is done ("ALL DONE") without calling task_complete' in end["next"]
    assert end["next"] in result.stdout
    assert "ended: the agent says it is done; paused (exit 3)" in watched.stdout


def ended(*, said_done: str | None, next_line: str = "") -> str:
    """The dashboard's state words after an agent's "ALL DONE." and an idle run_end."""
    from ouroboros.store import events as ev
    from ouroboros.ui.dashboard import DashboardState

    state = DashboardState()
    reply = ev.Assistant(text="ALL DONE.", finish_reason="stop", tool_calls=[], seq=1, turn=1)
    end = ev.RunEnd(
        reason="idle",
        exit_code=3,
        sessions=1,
        total_turns=1,
        restarts=0,
        next=next_line,
        said_done=said_done,
        seq=2,
        turn=1,
    )
    for event in (reply, end):
        state.apply(event.record())
    return state.status


def test_the_dashboard_takes_the_loops_word_for_done_and_reads_a_log_from_before_it():
    assert ended(said_done="ALL DONE") == "ended: the agent says it is done; paused (exit 3)"
    assert ended(said_done="") == "ended: idle (exit 3)"  # the loop judged: not done
    old = how_to_continue("idle", last_words="ALL DONE.")  # `next`, before `said_done` was kept
    assert (
        ended(said_done=None, next_line=old) == "ended: the agent says it is done; paused (exit 3)"
    )
    assert ended(said_done=None) == "ended: idle (exit 3)"
