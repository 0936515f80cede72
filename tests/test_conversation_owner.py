"""The conversation's one owner: other code asks it to append, mask, drop or replace, and the
bookkeeping that must follow each change (the running sums) follows it there, keyed by
position."""

from __future__ import annotations

import json
import random

import pytest

from ouroboros.window import conversation as conv
from ouroboros.window import ledger
from ouroboros.window.conversation import Conversation

CPT = 3.0


def walked(conversation: Conversation) -> int:
    return sum(
        ledger.message_tokens(r.message, CPT, measured=r.tokens) for r in conversation.records
    )


def worth(message: dict) -> str | None:
    """Results longer than 40 characters, not yet masked, are worth masking."""
    content = message.get("content") or ""
    if message["role"] != "tool" or content.startswith("[masked"):
        return None
    return message["tool_call_id"] if len(content) > 40 else None


def turn(i: int, size: int = 100) -> tuple[dict, str, str]:
    call_id = f"c{i}"
    assistant = {
        "role": "assistant",
        "content": f"turn {i}",
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "shell", "arguments": "{}"}}
        ],
    }
    return assistant, call_id, f"out {i} " + "x" * size


def held(turns: int, size: int = 100) -> Conversation:
    conversation = Conversation(
        [{"role": "system", "content": "mission"}, conv.note("continue", "go")], worth
    )
    for i in range(turns):
        assistant, call_id, text = turn(i, size)
        conversation.append(assistant)
        conversation.add_result(call_id, text)
    return conversation


def test_the_running_sums_follow_every_change_it_carries_out():
    conversation = held(5)
    assert conversation.tally.tokens(CPT) == walked(conversation)
    conversation.mask({"c1": "[masked c1]"})
    assert conversation[5]["content"] == "[masked c1]"
    assert conversation.tally.candidates() == ["c0", "c2", "c3", "c4"]
    assert conversation.tally.tokens(CPT) == walked(conversation)
    assert conversation.drop_oldest_turn(keep=2)
    assert [m["content"] for m in conversation if m["role"] == "assistant"] == [
        "turn 1",
        "turn 2",
        "turn 3",
        "turn 4",
    ]
    assert conversation.tally.tokens(CPT) == walked(conversation)
    assert conversation.tally.starts == [2, 4, 6, 8]
    conversation.replace_system({"role": "system", "content": "a new mission " * 20})
    conversation.drop(8)
    conversation.add_note("continue", "go on")
    assert conversation.tally.tokens(CPT) == walked(conversation)
    assert conversation.tally.wire().json == tuple(
        json.dumps(m, separators=(",", ":")).encode() for m in conversation
    )


def test_the_oldest_turn_goes_never_the_preamble_nor_the_newest():
    conversation = held(2)
    assert conversation.drop_oldest_turn(keep=1)
    assert [m["role"] for m in conversation] == ["system", "user", "assistant", "tool"]
    assert conversation[2]["content"] == "turn 1"
    assert not conversation.drop_oldest_turn(keep=1)
    assert len(conversation) == 4


def test_the_same_message_twice_is_counted_twice():
    """Keyed by position, not by the object: a message held twice is two messages."""
    conversation = held(0)
    again = {"role": "user", "content": "the same words " * 10}
    conversation.append(again)
    conversation.append(again)
    assert conversation.tally.tokens(CPT) == walked(conversation)
    conversation.drop(3)
    assert conversation.tally.tokens(CPT) == walked(conversation)


OPERATIONS = (
    "append",
    "result",
    "note",
    "mask",
    "drop_turn",
    "cut",
    "system",
    "measure",
)


@pytest.mark.parametrize("seed", range(12))
def test_the_running_sums_follow_any_mix_of_changes(seed):
    rng = random.Random(seed)
    conversation = held(3)
    texts: dict[str, str] = {}  # call id -> its result, until it is added
    for step in range(150):
        operation = rng.choice(OPERATIONS)
        if operation == "append":
            assistant, call_id, text = turn(100 + step, rng.randrange(10, 200))
            conversation.append(assistant)
            texts[call_id] = text
        elif operation == "result" and texts:
            call_id, text = texts.popitem()
            conversation.add_result(call_id, text)
        elif operation == "note":
            conversation.add_note("continue", f"note {step}")
        elif operation == "mask" and conversation.tally.candidates():
            conversation.mask({rng.choice(conversation.tally.candidates()): f"[masked {step}]"})
        elif operation == "drop_turn":
            conversation.drop_oldest_turn(keep=rng.randrange(1, 3))
        elif operation == "cut" and len(conversation) > 4:
            conversation.drop(rng.randrange(3, len(conversation)))
        elif operation == "system":
            conversation.replace_system({"role": "system", "content": f"mission {step}"})
        elif operation == "measure" and conversation.tally.unmeasured():
            conversation.measure(rng.choice(conversation.tally.unmeasured()), step)
        assert conversation.tally.tokens(CPT) == walked(conversation), f"step {step}"
        assert conversation.tally.starts == conv.turn_starts(conversation), f"step {step}"


def test_a_fresh_start_fitted_apart_is_adopted_whole():
    conversation = held(3)
    fresh = Conversation(
        [conversation[0], conv.note("restart", "restarted"), *conversation[-2:]], worth
    )
    conversation.adopt(fresh)
    assert conversation == fresh.messages
    assert conversation.tally.tokens(CPT) == walked(conversation)


def test_what_is_kept_beside_each_message_travels_with_it_never_in_it():
    """A measured size and a note kind are the conversation's, beside the message: a drop
    moves them with it, masking forgets the size of what it replaced, and a fresh start
    built of records and adopted keeps both (nothing is sized again)."""
    conversation = held(3)
    conversation.measure(3, 40)
    conversation.measure(5, 41)
    conversation.add_note("wind_down", "save")
    assert conversation.notes[:] == [None, "continue", *[None] * 6, "wind_down"]
    assert all(set(m) <= {"role", "content", "tool_calls", "tool_call_id"} for m in conversation)

    conversation.drop_oldest_turn(keep=1)  # the turn at 2-3 goes: the rest move up
    assert [conversation.measured_at(i) for i in (3, 5)] == [41, None]
    assert conversation.notes[-1] == "wind_down"
    conversation.mask({"c1": "[masked c1]"})
    assert conversation.measured_at(3) is None
    assert conversation.tally.tokens(CPT) == walked(conversation)

    conversation.measure(5, 42)
    carried = conv.carryover(conversation.records, 1)
    fresh = Conversation([conv.Record(conversation[0]), *carried, conv.note("restart", "go")])
    assert [r.tokens for r in carried] == [None, 42]
    conversation.adopt(fresh)
    assert conversation.records[1:] == [*carried, conv.note("restart", "go")]
    assert conversation.tally.tokens(CPT) == walked(conversation)
