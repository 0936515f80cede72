"""The demo's narration and pace: captions as a pure function of one event, the --speed
option, and a demo agent whose first steps do not fail."""

from __future__ import annotations

import json
import math

import pytest

from ouroboros.demo import DemoAgent, Pacer, parse_speed, reading_secs
from ouroboros.errors import UsageError
from ouroboros.ui.captions import CaptionedConsole, caption, closing, opening


def event(type: str, session: int = 1, turn: int = 3, **fields) -> dict:
    return {
        "type": type,
        "ts": "2026-11-26T05:50:00+00:00",
        "seq": 7,
        "session": session,
        "turn": turn,
        **fields,
    }


def mask(masked: int, total: int, preflight: bool = False) -> dict:
    return event(
        "context_mask",
        observations_masked=masked,
        total_masked=total,
        tokens_before=3665,
        tokens_after=2962,
        reclaimed_pct=19.2,
        preflight=preflight,
    )


def restart(session: int) -> dict:
    return event(
        "session_restart",
        session=session,
        turn=0,
        previous_turns=11,
        carryover_messages=7,
        carryover_masked=1,
        carryover_turns_dropped=0,
        reason="context at 97% of the budget after the wind-down",
    )


def run_end(reason: str) -> dict:
    return event(
        "run_end",
        reason=reason,
        exit_code=0,
        sessions=3,
        total_turns=28,
        restarts=2,
        resumable=False,
    )


# -- caption(event) --


def test_the_first_mask_says_what_was_masked_why_and_how_to_get_it_back():
    text = caption(mask(1, 1))

    assert "passed the soft threshold" in text
    assert "the oldest tool result became a one-line placeholder saying what was there" in text
    assert "from 3,665 to 2,962 tokens without losing a turn" in text
    assert "recall(id)" in text


def test_later_masks_are_short_and_count():
    assert caption(mask(3, 8)) == ("Masked 3 more tool results: 703 tokens back, 8 masked so far.")
    assert caption(mask(2, 2)).startswith(
        "Masked: the context passed the soft threshold, so the 2 oldest tool results"
    )


def test_a_mask_to_fit_a_request_says_so():
    assert caption(mask(2, 5, preflight=True)) == (
        "The next request would not have fit, so 2 tool results masked first "
        "(3,665 -> 2,962 tokens)."
    )


def test_the_wind_down_says_what_it_asks_of_the_agent_and_why():
    text = caption(event("wind_down", context_used_pct=94.0))

    assert text.startswith(
        "Wind-down: the context is at 94.0% of the budget, past the hard threshold"
    )
    assert "save its progress and state to workspace files now" in text
    assert "only files carry over" in text
    assert caption(event("wind_down", session=2, context_used_pct=90.6)) == (
        "Wind-down again at 90.6% of the budget: save your state, the agent is told."
    )
    assert "reads the config again" in caption(
        event("wind_down", context_used_pct=40.0, reason="reload")
    )


def test_the_first_restart_says_what_carries_over():
    text = caption(restart(2))

    assert text.startswith(
        "Restart (context at 97% of the budget after the wind-down): "
        "session 2 starts from a fresh context"
    )
    assert "SYSTEM_PROMPT.md read again from disk" in text
    assert "the last 7 messages of session 1 carried over" in text
    assert "progress.md" in text
    assert caption(restart(3)) == "Restart: session 3 starts fresh, 7 messages carried over."


@pytest.mark.parametrize(
    "reason,says",
    [
        (
            "task_complete",
            "The agent called task_complete, which ends the run: 28 turns in "
            "3 sessions, 2 restarts.",
        ),
        (
            "interrupted",
            "Stopped by Ctrl+C at once, the turn in progress cut short (28 turns in 3 "
            "sessions, 2 restarts).",
        ),
        ("interrupted_now", "Stopped at once by a second Ctrl+C"),
        ("error", "The run failed after 28 turns"),
        ("max_restarts", "The run ended (max_restarts) after 28 turns"),
    ],
)
def test_the_end_says_why_the_run_ended(reason, says):
    assert caption(run_end(reason)).startswith(says)


def test_the_first_session_explains_the_window_and_its_thresholds():
    first = event(
        "session_start",
        turn=0,
        context_limit=4096,
        limit_source="config",
        budget=3584,
        carryover_messages=0,
    )
    later = dict(first, session=2, carryover_messages=7)

    assert caption(first).startswith(
        "The model's window is 4,096 tokens; the prompt may take 3,584 of them"
    )
    assert "context.soft_threshold_pct" in caption(first)
    assert caption(later) is None


def test_a_cut_tool_result_and_a_recall_are_explained():
    cut = event(
        "tool_result",
        id="c1",
        name="file_read",
        ok=True,
        bytes=2900,
        duration_ms=1,
        observation="obs-3",
        truncated=True,
        summary="KEY: f2a752e6b438",
    )
    recall = event("tool_call", id="c9", name="recall", arguments='{"id": "obs-3"}')

    assert "cut it on arrival" in caption(cut)
    assert "recall" in caption(recall)


@pytest.mark.parametrize(
    "quiet",
    [
        event(
            "token_usage",
            prompt_tokens=902,
            completion_tokens=17,
            total_tokens=919,
            context_limit=4096,
            budget=3584,
            context_used_pct=25.2,
            source="server",
        ),
        event(
            "tool_result",
            id="c1",
            name="list_dir",
            ok=True,
            bytes=5,
            duration_ms=1,
            observation="obs-1",
            truncated=False,
            summary="data/",
        ),
        event("tool_call", id="c1", name="file_read", arguments='{"path": "a"}'),
        event("assistant", text="Reading part 1.", finish_reason="stop", tool_calls=[]),
        event("session_end", reason="restart"),
    ],
)
def test_events_that_speak_for_themselves_have_no_caption(quiet):
    assert caption(quiet) is None


# -- the opening and closing lines --


def test_the_opening_says_what_is_about_to_happen_and_how_to_change_the_pace():
    paced = opening(12, 4096, paced=True)

    assert paced.startswith(
        "Ouroboros demo: a scripted agent (no model server needed) must "
        "copy the KEY line of 12 files into results.txt, in a 4,096-token "
        "window"
    )
    assert "masks old tool results" in paced and "restarts the session" in paced
    assert "--speed max" in paced
    assert "--speed" not in opening(12, 4096, paced=False)


def test_the_closing_points_to_the_kept_project_or_says_it_is_gone(tmp_path):
    kept = closing(tmp_path, kept=True)
    removed = closing(tmp_path, kept=False)

    assert f"ouroboros stats --config {tmp_path / 'ouroboros.toml'}" in kept
    assert f"ouroboros logs --config {tmp_path / 'ouroboros.toml'}" in kept
    assert str(tmp_path) not in removed
    assert "removed" in removed and "ouroboros demo --keep DIR" in removed
    for text in (kept, removed):
        assert "ouroboros init my-agent" in text


# -- the pace --


@pytest.mark.parametrize(
    "given,interactive,speed",
    [
        (None, True, 1.0),
        (None, False, math.inf),
        ("max", True, math.inf),
        ("MAX", False, math.inf),
        ("2", True, 2.0),
        ("0.5", False, 0.5),
    ],
)
def test_speed(given, interactive, speed):
    assert parse_speed(given, interactive=interactive) == speed


@pytest.mark.parametrize("given", ["0", "-1", "fast", "nan", ""])
def test_a_speed_that_is_not_a_positive_number_or_max_is_refused(given):
    with pytest.raises(UsageError) as caught:
        parse_speed(given, interactive=True)
    assert caught.value.message == (
        f"--speed takes a positive number (2 is twice as fast) or max, not {given!r}"
    )


def test_a_caption_earns_a_reading_pause_of_at_most_three_seconds():
    assert reading_secs("Masked 1 more tool result.") == pytest.approx(5 / 6)
    assert reading_secs("word " * 200) == 3.0


# -- the demo agent --


def listing(*entries: str) -> list[dict]:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "list_dir", "arguments": json.dumps({"path": "."})},
    }
    return [
        {"role": "system", "content": "mission"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "\n".join(entries)},
    ]


def test_a_fresh_workspace_is_not_searched_for_progress_md():
    agent = DemoAgent(3, Pacer())

    reply = agent(listing("data/"))

    assert reply.tool_calls == [("file_read", {"path": "data/part_001.txt"})]
    assert reply.text.startswith("No progress.md yet, so this is a fresh start.")


def test_saved_progress_is_read_when_the_listing_shows_it():
    agent = DemoAgent(3, Pacer())

    reply = agent(listing("data/", "progress.md (8 bytes)"))

    assert reply.tool_calls == [("file_read", {"path": "progress.md"})]


def test_a_stopped_pacer_never_holds_a_reply():
    pacer = Pacer(speed=1e-9)  # a step would take years
    pacer.hold(3.0)
    pacer.stop()

    assert DemoAgent(3, pacer)(listing("data/")).tool_calls  # returns at once


def test_the_live_dashboard_leaves_room_above_it_for_the_captions():
    console = CaptionedConsole(reserve=6, width=80, height=24)

    assert tuple(console.size) == (80, 18)
