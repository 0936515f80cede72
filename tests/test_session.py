"""One session, driven directly: how it keeps the window (masking, wind-down, restart with
carryover, refusals as too long, a window too small to work in). A fake model with chosen
replies, usage and errors, real tools in a temporary workspace, the events in memory: no
HTTP, no subprocess, each test in milliseconds (tests/session_rig.py)."""

from __future__ import annotations

import re

import pytest

from ouroboros.errors import (
    ContextOverflowError,
    EmptyStreamError,
    ModelError,
    ServerUnreachableError,
    WindowTooSmallError,
)
from ouroboros.loop.endings import RestartSession, StopRun
from ouroboros.loop.reload import RELOAD_REASON, RELOAD_WIND_DOWN_TEXT
from ouroboros.loop.restart import count_progress, fresh_start, may_restart
from ouroboros.loop.session import MAX_OVERFLOW_RECOVERIES
from tests.fakes import FakeModel, call, reply
from tests.session_rig import SYSTEM, Rig, contents, reads

# --- the window: restart, wind-down, masking ------------------------------------------------


def test_a_full_window_restarts_with_the_newest_turns_carried_over(tmp_path):
    model = FakeModel()
    rig = Rig(tmp_path, model, limit=3000, carryover_turns=2)
    model.then = reads(rig, 1500)

    end = rig.run()

    assert isinstance(end, RestartSession) and "after the wind-down" in end.reason
    assert rig.log.of_type("context_mask") and rig.log.of_type("wind_down")
    old = list(rig.state.messages)
    newest = [m["content"] for m in old if m["role"] == "assistant"][-2:]
    turns = rig.state.session_turns
    rig.restart()
    fresh = list(rig.state.messages)
    assert fresh[0] == SYSTEM
    assert fresh[1]["content"].startswith("[Carried over from session 1")
    assert fresh[-1]["content"].startswith(
        f"[Session 2 of this run begins with a fresh context. Session 1 ended after {turns} turns"
    )
    assert [m["content"] for m in fresh if m["role"] == "assistant"] == newest
    assert fresh[-2] == old[-1]  # the newest result whole, as the agent last saw it
    assert not any(
        "Context nearly full" in text or "Context compressed" in text for text in contents(fresh)
    )

    model.then = lambda sent: reply("", call("task_complete", summary="saved and done"))
    end = rig.run()
    assert isinstance(end, StopRun) and end.reason == "task_complete"
    assert model.requests[-1] == fresh  # the new session began from exactly that
    assert rig.state.session == 2 and rig.state.session_turns == 1


def test_the_agent_is_told_to_wind_down_then_the_session_restarts(tmp_path):
    model = FakeModel()
    rig = Rig(tmp_path, model, limit=3000, keep_recent_observations=50)
    model.then = reads(rig, 150)  # results too short to be worth masking: nothing to mask

    end = rig.run()

    assert isinstance(end, RestartSession)
    [wind_down] = rig.log.of_type("wind_down")
    assert wind_down.context_used_pct >= 90 and not rig.log.of_type("context_mask")
    # told once, in the last request; the turn after it ended the session
    last = model.requests[-1]
    assert last[-1]["content"].startswith("[Context nearly full:")
    assert sum("Context nearly full" in text for text in contents(last)) == 1
    assert rig.log.types[-2:] == ["tool_call", "tool_result"]  # the turn ran whole


def test_masking_replaces_the_oldest_results_first(tmp_path):
    model = FakeModel()
    rig = Rig(
        tmp_path, model, limit=3000, max_turns=5, mask_batch_size=2, keep_recent_observations=1
    )
    model.then = reads(rig, 1500)

    end = rig.run()

    assert isinstance(end, StopRun) and end.reason == "max_turns"
    mask = rig.log.of_type("context_mask")[0]  # after turn 4, of 4 results
    assert mask.observations_masked == 3 and not mask.preflight  # down to the low-water mark
    results = [m["content"] for m in model.requests[4] if m["role"] == "tool"]
    for n in range(3):
        assert results[n].startswith(f"[file_read result masked: part{n}.txt")
    assert 'recall(id="obs-1")' in results[0]
    assert [r.split("\n")[0] for r in results[3:]] == ["PART 3"]
    assert model.requests[4][-1]["content"].startswith("[Context compressed: 3 observations")


def test_a_count_from_the_server_decides_how_full_the_window_is(tmp_path):
    """Small messages, but the server says the prompt took 2,800 of 3,000 tokens: the agent
    is told to wind down at once."""
    model = FakeModel(
        [
            reply(
                "",
                call("file_write", path="a.txt", content="a"),
                prompt_tokens=2800,
                completion_tokens=10,
            )
        ]
    )
    rig = Rig(tmp_path, model, limit=3000, max_turns=1)

    end = rig.run()

    assert isinstance(end, StopRun) and end.reason == "max_turns"
    [usage] = rig.log.of_type("token_usage")
    assert usage.source == "server" and usage.prompt_tokens == 2800
    assert rig.log.of_type("wind_down")


# --- refusals as too long -------------------------------------------------------------------


def test_a_refusal_as_too_long_shrinks_the_prompt_and_asks_again(tmp_path):
    model = FakeModel()
    rig = Rig(tmp_path, model, limit=4000, max_turns=4)
    step = reads(rig, 1500)
    refusal = ContextOverflowError("This model's maximum context length is 1500 tokens")
    model.script.extend([step, step, step, refusal, step])

    end = rig.run()

    assert isinstance(end, StopRun) and end.reason == "max_turns"
    [recovered] = rig.log.of_type("context_overflow_recovered")
    assert recovered.new_limit == 1500
    assert any(mask.preflight for mask in rig.log.of_type("context_mask"))
    refused, accepted = model.requests[3], model.requests[4]
    assert len(str(accepted)) < len(str(refused))
    assert any(text.startswith("[file_read result masked:") for text in contents(accepted))
    assert rig.state.total_turns == 4  # the refused request was not a turn


def test_a_server_that_keeps_refusing_ends_the_run_with_what_to_do(tmp_path):
    model = FakeModel(then=lambda sent: ContextOverflowError("prompt is too long"))
    rig = Rig(tmp_path, model, limit=4000)

    end = rig.run()

    assert isinstance(end, ModelError)
    assert end.message.startswith(
        f"the server kept refusing the prompt as too long after {MAX_OVERFLOW_RECOVERIES} "
        "attempts to shrink it"
    )
    assert "set model.context_limit" in end.message
    assert len(model.requests) == MAX_OVERFLOW_RECOVERIES + 1
    limits = [e.new_limit for e in rig.log.of_type("context_overflow_recovered")]
    assert len(limits) == MAX_OVERFLOW_RECOVERIES + 1 and limits == sorted(limits, reverse=True)
    assert rig.state.total_turns == 0 and not rig.log.of_type("assistant")


def test_the_oldest_whole_turns_are_dropped_when_masking_cannot_make_room(tmp_path):
    """A conversation (as a resume brings it) too big for the window, with nothing to mask:
    the oldest turns go whole; the preamble and the newest turn stay."""
    model = FakeModel([reply("", call("task_complete", summary="fits"))])
    rig = Rig(tmp_path, model, limit=1500)
    for i in range(8):
        write = call("file_write", path=f"n{i}.txt", content=f"note {i} " + "y" * 600)
        rig.state.messages.append(
            {"role": "assistant", "content": f"turn {i}", "tool_calls": [write.to_wire()]}
        )
        rig.state.messages.add_result(write.id, "ok")

    end = rig.run()

    assert isinstance(end, StopRun) and end.reason == "task_complete"
    [drop] = rig.log.of_type("context_drop")
    sent = model.requests[0]
    said = [m["content"] for m in sent if m["role"] == "assistant"]
    assert drop.turns_dropped == 8 - len(said) and drop.tokens_after <= 1500
    assert said == [f"turn {i}" for i in range(8 - len(said), 8)] and "turn 7" in said
    assert sent[:2] == rig.state.messages[:2]  # the system prompt and the kickoff


def test_an_empty_stream_for_a_prompt_that_fits_is_asked_again_as_it_was(tmp_path):
    model = FakeModel(
        [
            EmptyStreamError("the server sent no data"),
            reply("", call("task_complete", summary="ok")),
        ],
        prompt_count=120,
    )
    rig = Rig(tmp_path, model, limit=4000)

    end = rig.run()

    assert isinstance(end, StopRun) and end.reason == "task_complete"
    assert [e.error for e in rig.log.of_type("retry")] == ["the server sent no data"]
    assert not rig.log.of_type("context_overflow_recovered")
    assert rig.state.context.limit == 4000 and model.requests[0] == model.requests[1]


def test_a_transient_failure_is_retried(tmp_path):
    model = FakeModel(
        [
            ServerUnreachableError("connection refused"),
            reply("", call("task_complete", summary="ok")),
        ]
    )
    rig = Rig(tmp_path, model)

    end = rig.run()

    assert isinstance(end, StopRun) and end.reason == "task_complete"
    [retry] = rig.log.of_type("retry")
    assert retry.attempt == 1 and retry.error == "connection refused"


# --- a window too small to work in ----------------------------------------------------------


def test_a_system_prompt_that_fills_the_window_cannot_restart(tmp_path):
    rig = Rig(tmp_path, FakeModel(), limit=3000)
    huge = {"role": "system", "content": "rules " * 1500}

    with pytest.raises(WindowTooSmallError) as raised:
        fresh_start(rig.state, huge, rig.toolbox.schemas(), rig.policy, None)

    assert raised.value.message.startswith(
        "the run cannot make progress: a fresh session would start"
    )
    assert "3000-token window (test)" in raised.value.message
    assert "set model.context_limit to match, or shorten SYSTEM_PROMPT.md" in raised.value.message


def test_sessions_without_one_successful_tool_call_stop_the_run(tmp_path):
    """Three sessions in a row (ended by reloads) whose every call failed."""
    model = FakeModel(then=lambda sent: reply("", call("file_read", path="missing.txt")))
    rig = Rig(tmp_path, model)
    for session in range(1, 4):
        rig.state.reload = "requested"
        end = rig.run()
        assert isinstance(end, RestartSession) and end.reason == RELOAD_REASON
        assert model.requests[-1][-1]["content"] == RELOAD_WIND_DOWN_TEXT
        if session < 3:
            count_progress(rig.state)
            rig.restart()

    with pytest.raises(WindowTooSmallError) as raised:
        count_progress(rig.state)
    assert "3 sessions in a row ended without one successful tool call" in raised.value.message


@pytest.mark.parametrize(
    ("policy", "answer", "stops"),
    [
        ({"max_restarts": 2}, None, "max_restarts"),
        ({"auto_restart": False}, None, "restart_declined"),  # no one to ask
        ({"auto_restart": False}, False, "restart_declined"),
        ({"auto_restart": False, "max_restarts": 3}, True, None),
    ],
)
def test_a_restart_may_be_limited_or_need_a_yes(tmp_path, policy, answer, stops):
    rig = Rig(tmp_path, FakeModel(), **policy)
    rig.state.restarts = 2
    asked: list[str] = []

    def confirm(reason: str) -> bool:
        asked.append(reason)
        return bool(answer)

    try:
        may_restart(rig.state, rig.policy, "context full", None if answer is None else confirm)
    except StopRun as stop:
        assert stop.reason == stops
    else:
        assert stops is None
    assert asked == ([] if answer is None else ["context full"])


def test_a_session_with_a_successful_call_resets_the_count(tmp_path):
    rig = Rig(tmp_path, FakeModel())
    rig.state.barren_sessions, rig.state.session_successes = 2, 1
    count_progress(rig.state)
    assert rig.state.barren_sessions == 0


def test_reasoning_is_kept_out_of_the_history_but_logged(tmp_path):
    model = FakeModel(
        [
            reply("<think>plan it</think>Writing.", call("file_write", path="a.txt", content="A")),
            reply("", call("task_complete", summary="ok")),
        ]
    )
    rig = Rig(tmp_path, model)

    rig.run()

    said = [m["content"] for m in model.requests[1] if m["role"] == "assistant"]
    assert said == ["Writing."]
    assert rig.log.of_type("assistant")[0].text.startswith("<think>plan it</think>")


def test_a_newest_turn_too_big_for_the_window_is_sent_with_a_warning(tmp_path):
    model = FakeModel([reply("", call("task_complete", summary="ok"))])
    rig = Rig(tmp_path, model, limit=1000)
    rig.state.messages.replace_at(1, {**rig.state.messages[1], "content": "y" * 4000})

    rig.run()

    warnings = [w.message for w in rig.log.of_type("warning")]
    assert any("does not fit the 1000-token budget; sending it anyway" in w for w in warnings)
    assert model.requests[0][-1]["content"] == "y" * 4000


def test_a_tool_call_too_big_to_carry_over_is_named_as_the_cause(tmp_path):
    """Issue 36, item 8: one ~6,300-token file_write in the newest turn (carried into the next
    session whole) leaves a fresh session no room; the stop names that call and its size,
    not the system prompt."""
    rig = Rig(tmp_path, FakeModel(), limit=8192)
    content = " ".join(f"line{i}" for i in range(2200))
    rig.state.messages.append(
        reply("", call("file_write", path="big.txt", content=content)).to_message()
    )
    rig.state.messages.add_result(rig.state.messages[-1]["tool_calls"][0]["id"], "ok")

    with pytest.raises(WindowTooSmallError) as raised:
        fresh_start(rig.state, dict(SYSTEM), rig.toolbox.schemas(), rig.policy, None)

    message = raised.value.message
    assert "The largest part is one file_write call of the newest turn" in message
    assert re.search(r"~\d{4,} tokens", message)
    assert "shorten SYSTEM_PROMPT.md" not in message
