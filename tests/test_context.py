"""The context manager's decisions, each as a pure function of data."""

from __future__ import annotations

import json
import math

import pytest

from ouroboros.config import ContextConfig
from ouroboros.protocols import ToolCall, ToolResult, Usage
from ouroboros.window import conversation as conv
from ouroboros.window import ledger
from ouroboros.window.belief import named_window
from ouroboros.window.manager import ContextManager
from ouroboros.window.policy import (
    Continue,
    Mask,
    Restart,
    WindDown,
    brief_tools,
    decide,
    worth_a_round,
)
from tests.conversations import (
    answer,
    asked,
    assistant,
    conversation,
    held,
    manager,
    read_call,
    tool,
    tool_call,
    worked,
)

# --- zones ----------------------------------------------------------------------------------


def test_below_soft_threshold_continues():
    cm = manager()
    messages = conversation(cm, 6)
    assert cm.evaluate(6_999, messages) == Continue()


def test_above_the_soft_threshold_one_round_masks_the_oldest_down_to_the_low_water_mark():
    """Each result frees about a quarter of the budget: from 70%, two take it to 40%."""
    cm = manager(mask_batch_size=1, keep_recent_observations=2, mask_low_water_pct=0.4)
    messages = conversation(cm, 6, size=8_000)
    assert cm.evaluate(7_000, messages) == Mask(["c0", "c1"])


def test_a_round_too_small_to_reach_the_low_water_mark_waits():
    """Masking 3% of the budget would make the server process the whole prompt after the
    first placeholder again, for a turn or two of room: not yet."""
    cm = manager(mask_batch_size=3, keep_recent_observations=2)
    messages = conversation(cm, 6)  # results of ~1% of the budget each
    assert cm.evaluate(7_500, messages) == Continue()


def test_masking_never_touches_the_newest_observations():
    cm = manager(mask_batch_size=10, keep_recent_observations=2)
    messages = conversation(cm, 4, size=8_000)
    assert cm.evaluate(8_000, messages) == Mask(["c0", "c1"])


def test_soft_zone_with_nothing_left_to_mask_continues():
    cm = manager(keep_recent_observations=2)
    messages = conversation(cm, 2)
    assert cm.evaluate(8_000, messages) == Continue()


def test_hard_threshold_winds_down_first_then_restarts():
    cm = manager(keep_recent_observations=3)
    messages = worked(cm, conversation(cm, 3))
    assert cm.evaluate(9_500, messages) == WindDown()  # masking all three would not do
    decision = cm.evaluate(9_600, messages)
    assert isinstance(decision, Restart)


def test_above_the_hard_threshold_masking_comes_before_the_wind_down():
    cm = manager(mask_batch_size=3, keep_recent_observations=2)
    messages = conversation(cm, 4, size=8_000)  # ~2,000 tokens each: masking frees room
    assert cm.evaluate(9_500, messages) == Mask(["c0", "c1"])
    messages = cm.mask(messages, ["c0", "c1"])
    # then the recent one the agent has acted on, rather than winding down
    assert cm.evaluate(9_400, messages) == Mask(["c2"])


def test_at_the_hard_threshold_the_oldest_result_acted_on_goes_first_though_few_are_kept():
    """Fewer results than keep_recent_observations: the ones the agent has acted on are still
    masked oldest first before a wind-down (the newest, unacted, never)."""
    cm = manager(keep_recent_observations=5)
    messages = conversation(cm, 3, size=8_000)
    assert cm.evaluate(9_500, messages) == Mask(["c0"])


def test_a_session_that_masking_cannot_take_far_below_the_hard_threshold_winds_down():
    """Small results at 95%: masking them all would leave it above the middle of the two
    thresholds, so it would mask again every turn, creeping up until old turns were
    dropped from under the agent. It winds down and restarts instead."""
    cm = manager(mask_batch_size=3, keep_recent_observations=2)
    messages = worked(cm, conversation(cm, 6, size=400))  # ~6% of the budget could be freed
    assert cm.evaluate(9_500, messages) == WindDown()
    assert isinstance(cm.evaluate(9_500, messages), Restart)
    # Below the hard threshold, with enough to mask, one round takes it to the low-water mark.
    many = manager(mask_batch_size=3, mask_low_water_pct=0.4)
    decision = many.evaluate(7_500, conversation(many, 40, size=400))
    assert isinstance(decision, Mask)
    assert decision.tool_call_ids == [f"c{i}" for i in range(len(decision.tool_call_ids))]
    assert 20 < len(decision.tool_call_ids) < 38  # the oldest, as many as it takes


def test_the_fullness_rule_is_part_of_the_pure_decision():
    policy = ContextConfig(keep_recent_observations=0, mask_batch_size=2)
    candidates = [("a", 0.05), ("b", 0.05)]
    assert decide(policy, 0.95, candidates, False, maskable=0.3)[0] == Mask(["a", "b"])
    assert decide(policy, 0.95, candidates, False, maskable=0.1)[0] == WindDown()
    assert decide(policy, 0.95, candidates, False)[0] == Mask(["a", "b"])  # not known


def test_a_full_session_winds_down_even_when_recent_results_could_be_masked():
    """Full, with the agent's two newest results freeing 12%: before, it went on a turn at a
    time past the budget, and the save request itself had to be cut down to be sent."""
    policy = ContextConfig(keep_recent_observations=2)
    recent = [("c7", 0.06), ("c8", 0.06)]
    decision, wound = decide(
        policy, 0.97, [("c7", 0.06), ("c8", 0.06)], False, recent=recent, maskable=0.12
    )
    assert decision == WindDown() and wound


def test_dropping_below_hard_after_wind_down_rearms_it():
    cm = manager(keep_recent_observations=3)
    messages = worked(cm, conversation(cm, 3))
    assert cm.evaluate(9_500, messages) == WindDown()
    assert cm.evaluate(5_000, messages) == Continue()
    assert cm.evaluate(9_500, messages) == WindDown()


def test_hovering_about_the_hard_threshold_restarts_instead_of_winding_down_again():
    cm = manager(keep_recent_observations=3)
    messages = worked(cm, conversation(cm, 3))
    assert cm.evaluate(9_500, messages) == WindDown()
    assert cm.evaluate(8_800, messages) == Continue()  # the save turn dipped under hard
    assert isinstance(cm.evaluate(9_500, messages), Restart)


def test_zones_are_fractions_of_the_budget_after_the_output_reserve():
    cm = ContextManager.create(8192, "test", 1024, ContextConfig())
    assert cm.budget == 8192 - 1024
    assert cm.evaluate(math.ceil(0.9 * cm.budget), []) == WindDown()
    assert cm.evaluate(math.ceil(0.9 * cm.budget) - 1, []) == Continue()


def test_output_reserve_is_capped_at_a_quarter_of_a_small_window():
    cm = ContextManager.create(4096, "test", 2048, ContextConfig())
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


def test_masked_observations_are_not_masked_again():
    cm = manager(mask_batch_size=2, keep_recent_observations=0, mask_low_water_pct=0.6)
    messages = conversation(cm, 4, size=8_000)
    messages = cm.mask(messages, ["c0", "c1"])
    # c3, the newest turn's result, is not seen by the agent yet: never masked after a turn.
    assert cm.evaluate(7_500, messages) == Mask(["c2"])


# --- the ledger: what the window holds -----------------------------------------------------


def usage(prompt, completion=5):
    return Usage(prompt, completion)


def test_without_any_count_the_window_is_estimated_on_the_high_side():
    cm = manager()
    sent = [{"role": "user", "content": "y" * 900}]
    reading = cm.observe_reply(sent, [], None, reply_chars=30)
    assert reading.source == "estimate" and reading.verdict == "unknown"
    assert reading.prompt_tokens == 900 // 3 + ledger.MESSAGE_OVERHEAD_TOKENS
    assert reading.completion_tokens == 10


@pytest.mark.parametrize("reported", [None, Usage(None, 3), Usage(None, None)])
def test_absent_or_zero_counts_are_unknown_not_zero(reported):
    cm = manager()
    reading = cm.observe_reply([{"role": "user", "content": "y" * 900}], [], reported, 30)
    assert reading.verdict == "unknown" and cm.limit == 10_000
    assert reading.prompt_tokens > 0


def test_a_whole_count_is_attributed_to_the_messages_never_counted():
    cm = manager()
    later = held(
        cm, [{"role": "system", "content": "s" * 400}, {"role": "user", "content": "u" * 200}]
    )
    cm.observe_reply(later, [], usage(120), 10)
    assert cm.current_tokens(later, []) == 120
    later.append(assistant(text="a" * 40))
    later.append(tool("c1", "t" * 4000))
    cm.observe_reply(later, [], usage(1120), 10)
    assert cm.current_tokens(later, []) == 1120
    # The new tool result took most of the 1,000 new tokens: its share follows its size.
    assert later.measured_at(3) > 900
    # What comes after is estimated at the ratio the counts taught: ~4 chars per token here.
    later.append(tool("c2", "n" * 4000))
    assert cm.current_tokens(later, []) == pytest.approx(1120 + 1000, rel=0.1)


def test_the_ledger_adds_up_to_the_count_even_when_the_base_was_guessed_high():
    cm = manager()
    tools = [{"type": "function", "function": {"name": "x" * 900}}]  # the server skips these
    sent = held(cm, [{"role": "system", "content": "s" * 1200}])
    cm.observe_reply(sent, tools, usage(350), 10)
    assert cm.current_tokens(sent, tools) == 350
    sent = held(cm, sent.records + [conv.Record(m) for m in grow([], 1, size=800)])
    cm.observe_reply(sent, tools, usage(560), 10)
    assert cm.current_tokens(sent, tools) == 560


def test_the_base_never_goes_negative_when_a_count_is_below_what_the_ledger_explains():
    """Dense text the estimate took for small, then a count far below what the ledger already
    holds: the base stays at 0 or above, and the ledger stays at or above the count."""
    cm = manager(truncation_guard=False)
    first = [{"role": "system", "content": "s" * 400}, {"role": "user", "content": "u" * 3000}]
    cm.observe_reply(first, [], usage(3000), 10)
    later = first + [assistant(text="a" * 40), tool("c1", "t" * 4000)]
    cm.observe_reply(later, [], usage(1200), 10)
    assert cm.base_tokens is not None and cm.base_tokens >= 0
    assert cm.current_tokens(later, []) >= 1200


@pytest.mark.parametrize("reported", [-40, 10**8])
def test_a_nonsense_count_leaves_the_ledger_as_it_was(reported):
    cm = manager()
    later = held(
        cm, [{"role": "system", "content": "s" * 400}, {"role": "user", "content": "u" * 200}]
    )
    cm.observe_reply(later, [], usage(120), 10)
    later.append(assistant(text="a" * 40))
    later.append(tool("c1", "t" * 4000))
    before = (cm.current_tokens(later, []), cm.base_tokens, cm.window)
    reading = cm.observe_reply(later, [], usage(reported), 10)
    assert reading.verdict == "nonsense" and reading.source == "estimate"
    assert (cm.current_tokens(later, []), cm.base_tokens, cm.window) == before
    assert later.tokens[2:] == [None, None]


def test_masking_forgets_the_measured_size_of_what_it_replaced():
    cm = manager()
    messages = held(cm, conversation(cm, 3, size=4000))
    cm.observe_reply(messages, [], usage(3200), 10)
    assert messages.measured_at(3) is not None
    masked = cm.mask(messages, ["c0"])
    assert masked.measured_at(3) is None
    assert cm.current_tokens(masked, []) < 3200 - 900


# --- truncation: judged from evidence, never from "count below estimate" --------------------


def grow(messages, n, size=4000):
    start = len([m for m in messages if m["role"] == "tool"])
    return messages + [
        m for i in range(start, start + n) for m in (assistant(f"g{i}"), tool(f"g{i}", "w" * size))
    ]


def test_a_count_far_below_the_estimate_is_not_truncation():
    """A tokenizer that packs 8 characters per token: the estimate is 2.7x high."""
    cm = manager(limit=32_000)
    sent = grow([{"role": "system", "content": "s"}], 2)
    reading = cm.observe_reply(sent, [], usage(1000), 10)
    assert reading.verdict == "whole" and cm.limit == 32_000
    sent = grow(sent, 1)
    reading = cm.observe_reply(sent, [], usage(1500), 10)
    assert reading.verdict == "whole" and cm.limit == 32_000


def test_counts_that_stall_while_the_conversation_grows_prove_truncation():
    cm = manager(limit=32_000)
    sent = grow([{"role": "system", "content": "s"}], 2)
    cm.observe_reply(sent, [], usage(2300), 10)
    sent = grow(sent, 1)
    first = cm.observe_reply(sent, [], usage(2350), 10)
    assert first.verdict == "suspect" and cm.limit == 32_000  # one stall proves nothing
    sent = grow(sent, 1)
    second = cm.observe_reply(sent, [], usage(2340), 10)
    assert second.verdict == "truncated"
    assert cm.limit == 2350  # the most the server was seen to take
    assert "detected truncation" in cm.limit_source


def test_one_fall_then_growth_is_not_truncation():
    """A template that strips earlier reasoning makes one count fall; growth resumes."""
    cm = manager(limit=32_000)
    sent = grow([{"role": "system", "content": "s"}], 3)
    cm.observe_reply(sent, [], usage(3000), 10)
    sent = grow(sent, 1)
    assert cm.observe_reply(sent, [], usage(2800), 10).verdict == "suspect"
    sent = grow(sent, 1)
    assert cm.observe_reply(sent, [], usage(4800), 10).verdict == "whole"
    assert cm.limit == 32_000


def test_a_count_the_size_of_only_the_newest_messages_is_the_uncached_bug():
    cm = manager(limit=32_000)
    sent = grow([{"role": "system", "content": "s"}], 4)
    cm.observe_reply(sent, [], usage(4000), 10)
    sent = grow(sent, 1)
    for _ in range(3):
        reading = cm.observe_reply(sent, [], usage(1010), 10)
        assert reading.verdict == "uncached" and reading.source == "estimate"
    assert cm.limit == 32_000


def test_the_guard_can_be_turned_off_for_servers_that_misreport():
    cm = manager(limit=32_000, truncation_guard=False)
    sent = grow([{"role": "system", "content": "s"}], 2)
    cm.observe_reply(sent, [], usage(2300), 10)
    for _ in range(3):
        sent = grow(sent, 1)
        assert cm.observe_reply(sent, [], usage(2300), 10).verdict == "whole"
    assert cm.limit == 32_000


def test_a_refusal_that_names_the_window_sets_it():
    cm = manager(limit=16_384)
    cm.refused(
        5000,
        named_window(
            "This model's maximum context length is 2048 tokens. "
            "However, you requested 5000 tokens."
        ),
    )
    assert cm.limit == 2048
    assert "named" in cm.limit_source


def test_a_refusal_never_lowers_the_limit_below_what_the_server_took_whole():
    cm = manager(limit=8192)
    sent = grow([{"role": "system", "content": "s"}], 5)
    cm.observe_reply(sent, [], usage(6000), 10)
    cm.refused(2000, None)  # a stray error for a prompt smaller than one already taken
    assert cm.limit == 6000


def test_state_round_trips_through_a_snapshot():
    cm = manager()
    messages = conversation(cm, 4)
    cm.mask(messages, ["c0"])
    cm.observe_reply(messages, [], usage(900), 30)
    cm.refused(800, None)
    restored = ContextManager.from_dict(json.loads(json.dumps(cm.to_dict())), cm.policy)
    assert restored == cm


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
    messages = held(cm, [{"role": "system", "content": "s" * 100}, conv.note("continue", "go")])
    for i in range(5):
        messages.append(assistant(text="t" * 800))
        messages.add_note("continue", "go on")
    messages = messages.records
    fitted = cm.fit(held(cm, messages), [])
    assert fitted.dropped_turns > 0
    assert fitted.messages.records[0] == messages[0]  # never the system prompt
    assert fitted.messages.records[-2:] == messages[-2:]  # never the newest turn, its note
    assert fitted.tokens <= cm.budget
    roles = [m["role"] for m in fitted.messages]
    assert roles[2] == "assistant"


def test_fit_keeps_the_newest_turn_even_when_it_alone_is_too_big():
    cm = manager(limit=100)
    messages = [{"role": "system", "content": "s"}, assistant(text="t" * 4000)]
    fitted = cm.fit(messages, [])
    assert fitted.messages == messages


# --- tool results on arrival ----------------------------------------------------------------


def test_admit_caps_results_at_a_quarter_of_the_budget():
    cm = manager(limit=8_000, max_tool_result_tokens=8_000)
    result = ToolResult("z" * 100_000)
    obs = conv.describe(ToolCall("c1", "shell_exec", ""), "cat big", result, "obs-1")
    content = cm.admit(obs, result.content)
    assert len(content) < 8_000 + 200
    assert obs.truncated


@pytest.mark.parametrize(
    "used,candidates,wound_down,decision,after",
    [
        (0.50, ["a", "b", "c"], False, Continue(), False),
        (0.50, ["a", "b", "c"], True, Continue(), False),  # back below hard: the wind-down rearms
        (0.75, ["a", "b", "c", "d", "e"], False, Mask(["a", "b", "c"]), False),
        (0.75, ["a", "b"], False, Continue(), False),  # only the newest two: kept
        (0.95, ["a", "b", "c"], False, Mask(["a"]), False),  # masking before winding down
        (0.95, ["a", "b"], False, WindDown(), True),
        (
            0.95,
            ["a", "b"],
            True,
            Restart("context at 95.0% of the budget after the wind-down"),
            True,
        ),
        (0.85, [], True, Continue(), True),  # under hard but above soft: still wound down
    ],
)
def test_decide(used, candidates, wound_down, decision, after):
    shares = [(name, 0.15) for name in candidates]
    assert decide(ContextConfig(), used, shares, wound_down) == (decision, after)


def test_a_server_that_never_shows_the_model_its_tools_is_believed():
    """llama-cpp-python's chatml: the tool schemas cost nothing, the count is far below the
    estimate of messages plus schemas, but not below the messages alone."""
    cm = manager()
    tools = [{"type": "function", "function": {"name": "x" * 2300}}]
    sent = held(
        cm,
        [
            conv.Record({"role": "system", "content": "s" * 600}, tokens=201),
            conv.Record({"role": "user", "content": "u" * 400}, tokens=131),
        ],
    )
    reading = cm.observe_reply(sent, tools, usage(338), 10)
    assert reading.verdict == "whole"
    assert cm.current_tokens(sent, tools) == 338


# --- dense content: estimates and caps in tokens ---------------------------------------------

CJK = "上下文窗口的管理在密集的内容中必须以词元计算而不是字符" * 40


def test_dense_scripts_are_estimated_per_character_with_a_margin():
    """A vocabulary trained on Latin text spends about a token or more on each CJK
    character: 3 characters per token (the default ratio) would be 3x short."""
    assert ledger.estimate_text(CJK, 3.0) >= len(CJK)
    assert ledger.estimate_text("plain words " * 100, 3.0) == math.ceil(1200 / 3.0)


def test_a_dense_tool_result_is_capped_in_tokens_not_characters():
    cm = manager(limit=8192, max_tool_result_tokens=1000)
    obs = conv.describe(ToolCall("c1", "file_read", ""), "zh.txt", ToolResult(CJK * 10), "obs-1")
    capped = cm.admit(obs, CJK * 10)
    assert obs.truncated
    assert len(capped) <= 1000  # 1,000 tokens hold at most ~1,000 CJK characters
    plain = "plain words " * 2000
    obs = conv.describe(ToolCall("c2", "file_read", ""), "en.txt", ToolResult(plain), "obs-2")
    assert len(cm.admit(obs, plain)) >= 2500  # Latin text keeps its characters per token


def test_counts_of_dense_text_teach_a_rate_of_their_own():
    calibration = ledger.Calibration()
    calibration.observe(4000, 1000)  # English: 4 characters a token
    calibration.observe(1000, 1300, dense=1000)  # CJK: 1.3 tokens a character
    assert calibration.chars_per_token == pytest.approx(4.0)
    assert calibration.tokens_per_dense_char == pytest.approx(1.3)


# --- never mask what the agent needs to go on ------------------------------------------------


def test_a_short_result_is_not_worth_masking_its_placeholder_is_no_smaller():
    """The agent's 115-byte read of its progress file: masking it frees nothing."""
    cm = manager()
    text = "next: part 17\n" + "done: 1-16, keys in results.txt\n" * 5
    obs = conv.describe(ToolCall("c1", "file_read", ""), "progress.md", ToolResult(text), "obs-1")
    message = tool("c1", cm.admit(obs, text))
    assert conv.worth_masking(message, cm.observations) is None


def test_at_the_hard_threshold_acted_on_results_are_masked_rather_than_winding_down():
    policy = ContextConfig(keep_recent_observations=2)
    decision, wound = decide(policy, 0.95, ["c7", "c8"], False, recent=[("c7", 0.20)], unacted=1)
    assert decision == Mask(["c7"]) and not wound


def test_a_result_just_read_gets_its_turn_when_masking_it_then_will_free_enough():
    """Winding down right after a big read made the agent save instead of using it; masking
    it once acted on frees enough, so the agent is given that turn."""
    policy = ContextConfig(keep_recent_observations=2)
    decision, wound = decide(policy, 0.95, ["c8"], False, recent=[], unacted=1, pending=0.3)
    assert decision == Continue() and not wound
    decision, wound = decide(policy, 0.95, ["c8"], False, recent=[], unacted=1, pending=0.01)
    assert decision == WindDown() and wound


def test_the_turn_a_wind_down_interrupted_is_never_dropped_before_others():
    cm = manager(limit=4000)
    messages = held(cm, conversation(cm, 4, size=1200))
    read_at = len(messages) - 2  # the newest read, c3, then the note
    messages.add_note("wind_down", "save now")
    messages.append(assistant("c9"))
    messages.append(tool("c9", "saved"))
    assert conv.unacted_turns(messages, messages.notes) == 2
    messages = messages.records
    fitted = cm.fit(held(cm, messages), [], target=cm.current_tokens(held(cm, messages), []) - 500)
    assert messages[read_at].message in fitted.messages  # the older reads went first
    assert fitted.dropped_turns >= 1 or fitted.masked


# --- small windows: the tools in short -------------------------------------------------------


@pytest.mark.parametrize(
    "fixed,budget,short",
    [
        (1061, 1536, True),  # a 2048 window: the system prompt and full tools take 69%
        (615, 1536, True),
        (614, 1536, False),  # the threshold: 40% of the budget
        (1100, 3072, False),
        (1100, 6144, False),  # 4096 and 8192 windows: the full form
    ],
)
def test_the_tools_go_short_when_the_fixed_part_is_large_for_the_window(fixed, budget, short):
    assert brief_tools(fixed, budget) is short


def test_a_session_sends_the_short_tools_in_a_small_window_and_relearns_the_base():
    full = [{"type": "function", "function": {"name": "t", "description": "d" * 3000}}]
    brief = [{"type": "function", "function": {"name": "t", "description": "d"}}]
    system = {"role": "system", "content": "mission"}
    big, small = manager(limit=16_000), manager(limit=2048)
    assert big.session_tools(system, full, brief) is full and not big.brief
    small.base_tokens = 900  # learned from counts of prompts with the full tools
    assert small.session_tools(system, full, brief) is brief and small.brief
    assert small.base_tokens is None


def test_a_session_that_has_done_no_work_acts_on_what_it_just_read_first():
    """A 2,048 window: the fixed part takes half the budget, the first part read takes the
    session past the hard threshold. Winding down there made the agent save before recording
    the part, every session, and no session got further (1/40 in 650 requests)."""
    policy = ContextConfig(keep_recent_observations=2)
    idle = decide(policy, 0.97, [("c1", 0.3)], False, unacted=1, maskable=0.0, idle=True)
    assert idle == (Continue(), False)
    working = decide(policy, 0.97, [("c1", 0.3)], False, unacted=1, maskable=0.0)
    assert working == (WindDown(), True)
    over = decide(policy, 1.02, [("c1", 0.3)], False, unacted=1, maskable=0.0, idle=True)
    assert over == (WindDown(), True)  # a prompt that does not fit gets no such turn


def test_an_agent_that_saved_and_read_in_one_turn_records_what_it_read_first():
    """The chatter row of issue 36: the agent writes its notes and reads the next part in one
    turn, and that turn takes the session past the hard threshold. Told to wind down there,
    it saved again what it had just saved, the part went unrecorded into the next session,
    and every session held one part where it could hold two (154 requests against 120)."""
    policy = ContextConfig(keep_recent_observations=2)
    args = {"unacted": 1, "maskable": 0.0}
    fresh = decide(policy, 0.93, [("c1", 0.3)], False, **args, read_after_save=True)
    assert fresh == (Continue(), False)
    assert decide(policy, 0.93, [("c1", 0.3)], False, **args) == (WindDown(), True)
    told = decide(policy, 0.93, [("c1", 0.3)], True, **args, read_after_save=True)
    assert isinstance(told[0], Restart)  # told once already: no second such turn
    over = decide(policy, 1.02, [("c1", 0.3)], False, **args, read_after_save=True)
    assert over == (WindDown(), True)  # a prompt that does not fit gets no such turn


def test_a_read_after_a_save_gets_one_turn_not_one_a_turn():
    """An agent that writes a file and reads another in every turn: past the hard threshold
    the first such turn goes on, the next winds down (it would otherwise go on to a full
    prompt, with no room left for the save)."""
    cm = manager(keep_recent_observations=1)
    messages = worked(cm, conversation(cm, 2))

    def write_and_read(i: int) -> list[dict]:
        write = tool_call(f"w{i}", "file_write", path="notes.md", content=f"next: {i + 1}\n")
        read = tool_call(f"r{i}", "file_read", path=f"data/{i}.txt")
        wrote = ToolResult("wrote 8 bytes (1 lines) to notes.md", meta={"path": "notes.md"})
        text = ToolResult(f"KEY: {i}\n" + "x" * 400, meta={"path": f"data/{i}.txt"})
        return [asked(write, read), answer(cm, write, wrote), answer(cm, read, text)]

    messages = held(cm, messages + write_and_read(1))
    assert 9_300 > cm.policy.hard_threshold_pct * cm.budget  # past it: only the grant goes on
    assert cm.evaluate(9_300, messages) == Continue()
    messages = held(cm, [*messages.records, *map(conv.Record, write_and_read(2))])
    assert cm.evaluate(9_400, messages) == WindDown()


def test_a_turn_read_after_a_save_when_it_wrote_and_read():
    cm = manager()
    read = conversation(cm, 1)[2:]  # its reply and its result
    call = tool_call("w0", "file_write", path="notes.md", content="next: 2\n")
    result = ToolResult("wrote 8 bytes (1 lines) to notes.md", meta={"path": "notes.md"})
    write = [asked(call), answer(cm, call, result)]
    both = [asked(call, read_call("c0")), write[1], read[1]]
    assert not conv.read_after_save(read, cm.observations)  # read only
    assert not conv.read_after_save(write, cm.observations)  # wrote only
    assert conv.read_after_save(both, cm.observations)


def test_work_is_a_write_or_a_command_that_succeeded_since_the_restart():
    cm = manager()
    reads = conversation(cm, 3)
    assert not conv.worked_this_session(reads, [None] * len(reads), cm.observations)
    at_work = worked(cm, reads)
    assert conv.worked_this_session(at_work, [None] * len(at_work), cm.observations)
    restarted = held(cm, [*at_work, conv.note("restart", "a new session")])
    assert not conv.worked_this_session(restarted, restarted.notes, cm.observations)


# --- masking that keeps the prompt cache (issue 32) -----------------------------------------


def long_session(cm: ContextManager, results: int, size: int, talk: int) -> list[dict]:
    """A session of `results` reads of `size` characters, each followed by turns of the
    agent's own words (`talk` characters): what a round would make the server process again
    after its first placeholder is everything that follows."""
    messages = conversation(cm, results, size=size)
    chatter = [assistant(text="w" * talk), {"role": "user", "content": "go on"}]
    out = messages[:2]
    for i in range(results):
        out += messages[2 + 2 * i : 4 + 2 * i] + chatter * 4
    return out


def test_a_round_that_frees_less_than_it_makes_the_server_process_again_gives_way():
    """Issue 32: a small local model muses at length between reads; masking the old reads
    would throw away the prompt cache for everything after them, more than it frees: the
    session winds down and restarts instead (a restart's first prompt is processed whole
    anyway)."""
    cm = manager(keep_recent_observations=1)
    messages = long_session(cm, 5, size=2_000, talk=1_000)
    assert cm.evaluate(9_500, messages) == WindDown()


def test_the_same_round_is_taken_where_results_outweigh_what_follows():
    cm = manager(keep_recent_observations=1)
    messages = long_session(cm, 5, size=8_000, talk=40)
    decision = cm.evaluate(9_500, messages)
    assert isinstance(decision, Mask) and decision.tool_call_ids[0] == "c0"


def test_a_short_session_masks_rather_than_restart():
    """Two turns of a ten-turn session would go to the save and the read of the notes: a
    restart costs more than the cache does there."""
    cm = manager(keep_recent_observations=1)
    messages = conversation(cm, 3, size=4_000)  # three turns: masking c0 frees less than
    assert cm.evaluate(9_500, messages) == Mask(["c0", "c1"])  # c1 and c2 after it hold


def test_without_a_prefix_cache_a_round_costs_nothing_more():
    cm = manager(keep_recent_observations=1, prefix_cache=False)
    messages = long_session(cm, 5, size=2_000, talk=1_000)
    assert isinstance(cm.evaluate(9_500, messages), Mask)


@pytest.mark.parametrize(
    "freed,after,turns,worth",
    [
        (0.2, 0.5, 20, False),  # frees 0.2, makes 0.3 processed again
        (0.3, 0.5, 20, True),  # frees what it costs
        (0.2, 0.5, 9, True),  # a short session: a restart would cost more
        (0.2, None, 20, True),  # unknown cost
    ],
)
def test_worth_a_round(freed, after, turns, worth):
    reprocessed = None if after is None else {"c0": after}.__getitem__
    assert worth_a_round("c0", freed, reprocessed, turns) is worth


def test_a_fresh_start_carries_the_results_the_agent_acted_on_masked():
    """The first prompt of a session is processed whole: a carried result the agent has
    acted on goes in as its placeholder there, not later at the price of all after it. The
    newest turn's result (not acted on yet) stays whole, room or not."""
    cm = manager()
    messages = conversation(cm, 3, size=400)
    fitted = cm.fit(messages, [], target=cm.budget, keep=1, fresh=True)
    assert fitted.masked == ["c0", "c1"]
    assert "KEY: 0002" in fitted.messages[-1]["content"]
    assert cm.fit(conversation(cm, 3, size=400), [], target=cm.budget, keep=1).masked == []


def test_after_a_turn_the_window_carries_its_decision_out():
    """The loop only logs what the window did: the placeholders and the notice are in the
    conversation when it hears of a Mask, the note when it hears of a WindDown."""
    cm = manager(keep_recent_observations=2, prefix_cache=False)
    messages = conv.Conversation(conversation(cm, 6, size=4_000), cm.worth_masking)
    end = cm.after_turn(messages, [])
    assert isinstance(end.decision, Mask) and end.after < end.before
    masked = {m["tool_call_id"] for m in messages if "result masked" in str(m.get("content"))}
    assert masked == set(end.decision.tool_call_ids)
    assert messages[-1]["content"].startswith("[Context compressed:")

    full = manager()
    crowded = worked(full, conversation(full, 1))
    crowded[0] = {"role": "system", "content": "mission " * 7_000}  # nothing to mask
    crowded = conv.Conversation(crowded, full.worth_masking)
    end = full.after_turn(crowded, [])
    assert end.decision == WindDown() and crowded[-1]["content"].startswith("[Context nearly full")
