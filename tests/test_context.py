"""The context manager's decisions, each as a pure function of data."""

from __future__ import annotations

import json
import math

import pytest

from ouroboros import context as ctx
from ouroboros.context import (
    Calibration,
    Continue,
    ContextManager,
    ContextSettings,
    Mask,
    Restart,
    WindDown,
)
from ouroboros.protocols import ToolResult


def assistant(*call_ids: str, text: str = "") -> dict:
    message = {"role": "assistant", "content": text}
    if call_ids:
        message["tool_calls"] = [
            {"id": i, "type": "function",
             "function": {"name": "file_read", "arguments": json.dumps({"path": f"{i}.txt"})}}
            for i in call_ids
        ]
    return message


def tool(call_id: str, content: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def manager(limit: int = 10_000, **settings) -> ContextManager:
    return ContextManager.create(limit, "test", max_output_tokens=0,
                                 settings=ContextSettings(**settings))


def conversation(cm: ContextManager, n_calls: int, size: int = 400) -> list[dict]:
    """system, kickoff, then n turns of one file_read each, registered with the manager."""
    messages = [{"role": "system", "content": "mission"}, ctx.note("continue", "go")]
    for i in range(n_calls):
        call_id = f"c{i}"
        messages.append(assistant(call_id))
        content = f"KEY: {i:04d}\n" + "x" * size
        result = ToolResult(content, meta={"path": f"data/{i}.txt"})
        obs = ctx.describe("file_read", {"path": f"data/{i}.txt"}, result,
                           cm.new_observation_id(), call_id)
        messages.append(tool(call_id, cm.admit(obs, content)))
    return messages


# --- zones ----------------------------------------------------------------------------------


def test_below_soft_threshold_continues():
    cm = manager()
    messages = conversation(cm, 6)
    assert cm.evaluate(6_999, messages) == Continue()


def test_at_soft_threshold_masks_oldest_batch_keeping_recent():
    cm = manager(mask_batch_size=3, keep_recent_observations=2)
    messages = conversation(cm, 6)
    assert cm.evaluate(7_000, messages) == Mask(["c0", "c1", "c2"])


def test_masking_never_touches_the_newest_observations():
    cm = manager(mask_batch_size=10, keep_recent_observations=2)
    messages = conversation(cm, 4)
    assert cm.evaluate(8_000, messages) == Mask(["c0", "c1"])


def test_soft_zone_with_nothing_left_to_mask_continues():
    cm = manager(keep_recent_observations=2)
    messages = conversation(cm, 2)
    assert cm.evaluate(8_000, messages) == Continue()


def test_hard_threshold_winds_down_first_then_restarts():
    cm = manager(keep_recent_observations=3)
    messages = conversation(cm, 3)
    assert cm.evaluate(9_000, messages) == WindDown()
    decision = cm.evaluate(9_100, messages)
    assert isinstance(decision, Restart)


def test_above_the_hard_threshold_masking_comes_before_the_wind_down():
    cm = manager(mask_batch_size=3, keep_recent_observations=2)
    messages = conversation(cm, 4)
    assert cm.evaluate(9_500, messages) == Mask(["c0", "c1"])
    messages = cm.mask(messages, ["c0", "c1"])
    assert cm.evaluate(9_400, messages) == WindDown()


def test_dropping_below_hard_after_wind_down_rearms_it():
    cm = manager(keep_recent_observations=3)
    messages = conversation(cm, 3)
    assert cm.evaluate(9_500, messages) == WindDown()
    assert cm.evaluate(5_000, messages) == Continue()
    assert cm.evaluate(9_500, messages) == WindDown()


def test_zones_are_fractions_of_the_budget_after_the_output_reserve():
    cm = ContextManager.create(8192, "test", max_output_tokens=1024, settings=ContextSettings())
    assert cm.budget == 8192 - 1024
    assert cm.evaluate(math.ceil(0.9 * cm.budget), []) == WindDown()
    assert cm.evaluate(math.ceil(0.9 * cm.budget) - 1, []) == Continue()


def test_output_reserve_is_capped_at_a_quarter_of_a_small_window():
    cm = ContextManager.create(4096, "test", max_output_tokens=2048, settings=ContextSettings())
    assert cm.budget == 3072


# --- masking and placeholders ---------------------------------------------------------------


def test_mask_replaces_only_the_content_and_keeps_the_chain():
    cm = manager()
    messages = conversation(cm, 3)
    masked = cm.mask(messages, ["c0"])
    assert len(masked) == len(messages)
    assert [m["role"] for m in masked] == [m["role"] for m in messages]
    assert masked[2] == messages[2]  # the call and its arguments stay
    assert masked[3]["tool_call_id"] == "c0"
    assert "masked" in masked[3]["content"]
    assert masked[5] == messages[5]
    assert cm.total_masked == 1


def test_placeholder_says_what_was_there():
    result = ToolResult("KEY: 9f2c1234567\nline two\n" * 71, meta={"path": "data/part_003.txt"})
    obs = ctx.describe("file_read", {"path": "data/part_003.txt"}, result, "obs-7", "c1")
    text = ctx.placeholder(obs)
    assert text.startswith("[file_read result masked: data/part_003.txt, 142 lines, ")
    assert "KB" in text
    assert 'began "KEY: 9f2c1234567"' in text
    assert "obs-7" in text


def test_placeholder_for_a_shell_command_names_command_and_exit_code():
    result = ToolResult("boom\n[exit code 2]", ok=False,
                        meta={"command": "make test", "exit_code": 2})
    obs = ctx.describe("shell_exec", {"command": "make test"}, result, "obs-1", "c1")
    text = ctx.placeholder(obs)
    assert "shell_exec result masked: make test" in text
    assert "exit code 2" in text


def test_masked_observations_are_not_masked_again():
    cm = manager(mask_batch_size=2, keep_recent_observations=0)
    messages = conversation(cm, 4)
    messages = cm.mask(messages, ["c0", "c1"])
    assert cm.evaluate(7_500, messages) == Mask(["c2", "c3"])


# --- estimates ------------------------------------------------------------------------------


def test_estimate_uses_four_chars_per_token_before_any_usage():
    assert Calibration().chars_per_token == 4.0
    messages = [{"role": "user", "content": "x" * 400}]
    assert ctx.estimate_tokens(messages, [], 4.0) == 100 + ctx.MESSAGE_OVERHEAD_TOKENS


def test_calibration_learns_this_runs_ratio():
    cm = manager()
    sent = [{"role": "user", "content": "y" * 3000}]
    reading = cm.observe_reply(sent, [], prompt_tokens=1000, completion_tokens=5, reply_chars=20)
    assert reading.source == "server"
    assert cm.chars_per_token == pytest.approx(3.0)
    assert cm.estimate([{"role": "user", "content": "z" * 300}], []) == 100 + 4


def test_missing_usage_falls_back_to_the_calibrated_estimate():
    cm = manager()
    sent = [{"role": "user", "content": "y" * 800}]
    reading = cm.observe_reply(sent, [], None, None, reply_chars=40)
    assert reading.source == "estimate"
    assert reading.prompt_tokens == 200 + 4
    assert reading.completion_tokens == 10


def test_current_tokens_anchors_on_the_server_count_plus_what_came_after():
    cm = manager()
    sent = [{"role": "user", "content": "y" * 4000}]
    cm.observe_reply(sent, [], prompt_tokens=1000, completion_tokens=5, reply_chars=20)
    later = sent + [{"role": "tool", "tool_call_id": "a", "content": "q" * 400}]
    assert cm.current_tokens(later, []) == 1000 + 100 + 4


# --- truncation guard -----------------------------------------------------------------------


def test_a_server_count_far_below_the_estimate_means_the_prompt_was_cut():
    cm = manager(limit=32_000)
    sent = [{"role": "user", "content": "y" * 40_000}]  # ~10,000 tokens at 4 chars/token
    reading = cm.observe_reply(sent, [], prompt_tokens=4000, completion_tokens=5, reply_chars=5)
    assert reading.truncated
    assert cm.truncation_detected
    assert cm.limit == 4000
    assert cm.calibration.tokens == 0  # a cut count must not skew the calibration


def test_after_truncation_the_limit_is_the_largest_prompt_the_server_took():
    cm = manager(limit=32_000)
    cm.observe_reply([{"role": "user", "content": "y" * 7000}], [], 2000, 5, 5)  # 3.5 c/t
    cm.observe_reply([{"role": "user", "content": "y" * 8400}], [], 2400, 5, 5)
    # Ollama dropped whole messages from the front: the count is far below the window.
    reading = cm.observe_reply([{"role": "user", "content": "y" * 14000}], [], 900, 5, 5)
    assert reading.truncated
    assert cm.limit == 2400


def test_once_calibrated_a_modest_shortfall_is_caught():
    cm = manager(limit=32_000)
    cm.observe_reply([{"role": "user", "content": "y" * 3500}], [], 1000, 5, 5)
    reading = cm.observe_reply([{"role": "user", "content": "y" * 10500}], [], 2500, 5, 5)
    assert reading.truncated  # ~3000 expected at this run's 3.5 chars per token


def test_a_close_count_is_not_truncation():
    cm = manager()
    sent = [{"role": "user", "content": "y" * 4000}]
    reading = cm.observe_reply(sent, [], prompt_tokens=900, completion_tokens=5, reply_chars=5)
    assert not reading.truncated
    assert cm.limit == 10_000


# --- carryover ------------------------------------------------------------------------------


def test_carryover_keeps_the_last_complete_turns():
    cm = manager()
    messages = conversation(cm, 6)
    carried = ctx.carryover(messages, 2)
    assert carried == messages[-4:]
    assert carried[0]["role"] == "assistant"


def test_carryover_never_splits_a_call_from_its_results():
    messages = [{"role": "system", "content": "s"}, ctx.note("continue", "go"),
                assistant("a", "b"), tool("a", "1"), tool("b", "2"),
                assistant(text="done"), ctx.note("continue", "go on"),
                assistant("c"), tool("c", "3")]
    carried = ctx.carryover(messages, 2)
    assert carried == messages[5:]
    carried = ctx.carryover(messages, 3)
    assert carried == messages[2:]
    ids = {c["id"] for m in carried for c in m.get("tool_calls", [])}
    assert ids == {m["tool_call_id"] for m in carried if m["role"] == "tool"}


def test_carryover_drops_stale_notes_about_the_old_window():
    messages = [{"role": "system", "content": "s"}, assistant("a"), tool("a", "1"),
                ctx.mask_notice(3, 40), ctx.note("wind_down", "save now")]
    assert ctx.carryover(messages, 5) == messages[1:3]


def test_carryover_of_zero_turns_is_empty():
    cm = manager()
    assert ctx.carryover(conversation(cm, 3), 0) == []


# --- fitting a request ----------------------------------------------------------------------


def test_fit_leaves_a_request_that_fits_alone():
    cm = manager()
    messages = conversation(cm, 3)
    fitted = cm.fit(messages, [])
    assert fitted.messages == messages and not fitted.masked and not fitted.dropped_turns


def test_fit_masks_oldest_first_until_it_fits():
    cm = manager(limit=1_000)
    messages = conversation(cm, 6, size=800)  # ~6 * 200 tokens
    fitted = cm.fit(messages, [])
    assert fitted.tokens <= cm.budget
    assert fitted.masked == ["c0", "c1", "c2", "c3", "c4"][: len(fitted.masked)]
    assert fitted.dropped_turns == 0


def test_fit_drops_oldest_whole_turns_as_a_last_resort():
    cm = manager(limit=400)
    messages = [{"role": "system", "content": "s" * 100}, ctx.note("continue", "go")]
    for i in range(5):
        messages += [assistant(text="t" * 800), ctx.note("continue", "go on")]
    fitted = cm.fit(messages, [])
    assert fitted.dropped_turns > 0
    assert fitted.messages[0] == messages[0]  # never the system prompt
    assert fitted.messages[-2:] == messages[-2:]  # never the newest turn
    assert fitted.tokens <= cm.budget
    roles = [m["role"] for m in fitted.messages]
    assert roles[2] == "assistant"


def test_fit_keeps_the_newest_turn_even_when_it_alone_is_too_big():
    cm = manager(limit=100)
    messages = [{"role": "system", "content": "s"}, assistant(text="t" * 4000)]
    fitted = cm.fit(messages, [])
    assert fitted.messages == messages


# --- tool results on arrival ----------------------------------------------------------------


@pytest.mark.parametrize("keep", ["head", "tail", "both"])
def test_oversized_results_are_cut_with_an_indicator(keep):
    text = "".join(f"line {i}\n" for i in range(5000))
    capped, cut = ctx.cap_text(text, 1000, keep, "obs-3")
    assert cut == len(text) - 1000
    assert f"{cut:,} characters cut" in capped
    assert 'recall(id="obs-3"' in capped
    if keep in ("head", "both"):
        assert capped.startswith("line 0\n")
    if keep in ("tail", "both"):
        assert capped.rstrip().endswith("line 4999")


def test_admit_caps_results_at_a_quarter_of_the_budget():
    cm = manager(limit=8_000, max_tool_result_tokens=8_000)
    result = ToolResult("z" * 100_000)
    obs = ctx.describe("shell_exec", {"command": "cat big"}, result, "obs-1", "c1")
    content = cm.admit(obs, result.content)
    assert len(content) < 8_000 + 200
    assert obs.truncated


def test_state_round_trips_through_a_snapshot():
    cm = manager()
    messages = conversation(cm, 4)
    cm.mask(messages, ["c0"])
    cm.observe_reply(messages, [], 900, 10, 30)
    restored = ContextManager.from_dict(json.loads(json.dumps(cm.to_dict())))
    assert restored == cm


def test_to_wire_strips_the_harness_private_keys():
    wire = ctx.to_wire([ctx.note("wind_down", "save")])
    assert wire == [{"role": "user", "content": "save"}]
