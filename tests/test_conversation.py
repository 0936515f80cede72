"""The conversation as data: placeholders, carryover, caps on tool results, the wire form."""

from __future__ import annotations

import pytest

from ouroboros.protocols import ToolCall, ToolResult
from ouroboros.window import conversation as conv
from tests.conversations import assistant, conversation, manager, tool


def test_placeholder_says_what_was_there():
    result = ToolResult("KEY: 9f2c1234567\nline two\n" * 71, meta={"path": "data/part_003.txt"})
    obs = conv.describe(ToolCall("c1", "file_read", ""), "data/part_003.txt", result, "obs-7")
    text = conv.placeholder(obs)
    assert text.startswith("[file_read result masked: data/part_003.txt, 142 lines, ")
    assert "KB" in text
    assert 'began "KEY: 9f2c1234567"' in text
    assert "obs-7" in text


def test_placeholder_for_a_shell_command_names_command_and_exit_code():
    result = ToolResult(
        "boom\n[exit code 2]", ok=False, meta={"command": "make test", "exit_code": 2}
    )
    obs = conv.describe(ToolCall("c1", "shell_exec", ""), "make test", result, "obs-1")
    text = conv.placeholder(obs)
    assert "shell_exec result masked: make test" in text
    assert "exit code 2" in text


def test_a_masked_recall_names_the_file_it_brought_back():
    """A recall's placeholder says what it showed again (the call it came from), not only
    an id: a session that finds it masked after a restart knows which file it was reading."""
    cm = manager()
    messages = conversation(cm, 1)  # obs-1: the file_read of data/0.txt
    text = messages[-1]["content"]
    for call_id, recalled in (("r1", "obs-1"), ("r2", "obs-2")):  # a recall, then of it
        shown = ToolResult(text, meta={"path": recalled})
        obs = conv.describe(
            ToolCall(call_id, "recall", ""), recalled, shown, cm.new_observation_id()
        )
        cm.admit(obs, text)
        assert conv.placeholder(obs).startswith(
            "[recall result masked: obs-1 (file_read data/0.txt), "
        )
    gone = conv.describe(
        ToolCall("r3", "recall", ""), "obs-9", ToolResult(text), cm.new_observation_id()
    )
    cm.admit(gone, text)  # one the registry no longer holds: its id alone
    assert conv.placeholder(gone).startswith("[recall result masked: obs-9, ")


def records(items: list) -> list[conv.Record]:
    """Messages as records (a note is one already)."""
    return [item if isinstance(item, conv.Record) else conv.Record(item) for item in items]


def test_carryover_keeps_the_last_complete_turns():
    cm = manager()
    messages = records(conversation(cm, 6))
    carried = conv.carryover(messages, 2)
    assert carried == messages[-4:]
    assert carried[0].message["role"] == "assistant"


def test_carryover_never_splits_a_call_from_its_results():
    messages = records(
        [
            {"role": "system", "content": "s"},
            conv.note("continue", "go"),
            assistant("a", "b"),
            tool("a", "1"),
            tool("b", "2"),
            assistant(text="done"),
            conv.note("continue", "go on"),
            assistant("c"),
            tool("c", "3"),
        ]
    )
    carried = conv.carryover(messages, 2)
    assert carried == [messages[5], *messages[7:]]  # the harness's note stays behind
    carried = conv.carryover(messages, 3)
    assert carried == [*messages[2:6], *messages[7:]]
    carried_messages = [record.message for record in carried]
    ids = {c["id"] for m in carried_messages for c in m.get("tool_calls", [])}
    assert ids == {m["tool_call_id"] for m in carried_messages if m["role"] == "tool"}


def test_carryover_keeps_each_message_s_measured_size():
    messages = records([{"role": "system", "content": "s"}, assistant("a")])
    messages.append(conv.Record(tool("a", "1"), tokens=17))
    assert conv.carryover(messages, 1) == messages[1:]


def test_carryover_drops_every_note_of_the_old_session():
    """An instruction of the old session's would read as if it still applied (a literal
    model saves again, before reading its notes): none is carried; a person's message is."""
    person = conv.Record({"role": "user", "content": "Skip part 7."})
    messages = records(
        [
            {"role": "system", "content": "s"},
            assistant("a"),
            tool("a", "1"),
            conv.mask_notice(3, 40),
            conv.note("wind_down", "save now"),
            person,
            conv.note("stuck", "loop"),
            conv.note("interrupted", "check it"),
            conv.note("restart", "re-read your notes"),
        ]
    )
    assert conv.carryover(messages, 5) == [*messages[1:3], person]


def test_carryover_of_zero_turns_is_empty():
    cm = manager()
    assert conv.carryover(records(conversation(cm, 3)), 0) == []


@pytest.mark.parametrize("keep", ["head", "tail", "both"])
def test_oversized_results_are_cut_with_an_indicator(keep):
    text = "".join(f"line {i}\n" for i in range(5000))
    capped, cut = conv.cap_text(text, 1000, keep, "obs-3")
    assert cut == len(text) - 1000
    assert f"{cut:,} characters cut" in capped
    assert 'recall(id="obs-3"' in capped
    if keep in ("head", "both"):
        assert capped.startswith("line 0\n")
    if keep in ("tail", "both"):
        assert capped.rstrip().endswith("line 4999")


def test_a_note_is_its_wire_form_and_its_kind_beside_it():
    assert conv.note("wind_down", "save") == (
        {"role": "user", "content": "save"},
        "wind_down",
        None,
    )
