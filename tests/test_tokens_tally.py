"""The tally: per-message sizes and wire forms kept as running sums by the conversation that
owns them, so a turn's bookkeeping costs what changed, and its figures are always those of a
walk over every message."""

from __future__ import annotations

import asyncio
import json

import httpx
import respx

from ouroboros.config import ContextConfig
from ouroboros.protocols import ToolCall, ToolResult, Usage
from ouroboros.server.client import ChatClient
from ouroboros.window import conversation as conv
from ouroboros.window import ledger
from ouroboros.window.manager import ContextManager
from ouroboros.window.policy import Mask
from tests.conversations import answer, asked

CHAT = "http://127.0.0.1:11434/v1/chat/completions"
TOOLS = [{"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}]
CLIENT = ChatClient(CHAT, "m")  # only builds request bodies: nothing is sent


def manager(limit: int = 100_000_000, **settings) -> ContextManager:
    return ContextManager.create(limit, "test", 1000, ContextConfig(**settings))


def add_turn(
    cm: ContextManager, messages: conv.Conversation | list[dict], i: int, size: int = 120
) -> None:
    """An assistant call and its result, registered with the manager as the session does."""
    call = ToolCall(f"c{i}", "shell", '{"command": "ls"}')
    messages.append(asked(call))
    messages.append(answer(cm, call, ToolResult(f"result {i}\n" + "x" * size), "ls"))


def start(cm: ContextManager, turns: int, size: int = 120, wrap=lambda m: m) -> conv.Conversation:
    messages = [{"role": "system", "content": "mission"}, {"role": "user", "content": "go"}]
    for i in range(turns):
        add_turn(cm, messages, i, size)
    notes = ["continue" if i == 1 else None for i in range(len(messages))]
    return conv.Conversation(list(map(conv.Record, map(wrap, messages), notes)), cm.worth_masking)


def walked(cm: ContextManager, messages: conv.Conversation) -> int:
    """The figure every turn used to walk the whole conversation for."""
    cpt = cm.chars_per_token
    return cm.base(TOOLS) + sum(
        ledger.message_tokens(r.message, cpt, measured=r.tokens) for r in messages.records
    )


def body(cm: ContextManager, messages: list[dict]) -> dict:
    return json.loads(CLIENT.request_body(cm.wire(messages), TOOLS))


class Watched(dict):
    """A message that counts how often its content is read: sizing or encoding a message
    reads it; a turn that costs what changed leaves the settled ones unread."""

    reads = 0

    def __getitem__(self, key):
        Watched.reads += 1
        return super().__getitem__(key)

    def get(self, key, default=None):
        Watched.reads += 1
        return super().get(key, default)

    def items(self):
        Watched.reads += 1
        return super().items()


def bookkeeping(cm: ContextManager, messages: conv.Conversation, i: int) -> None:
    """One turn's context and request work, as the session does it."""
    cm.fit(messages, TOOLS)
    sent = len(messages)
    CLIENT.request_body(cm.wire(messages), TOOLS)
    add_turn(cm, messages, i)  # the reply (and its result) come in before the count is read
    cm.observe_reply(messages, TOOLS, Usage(cm.current_tokens(messages, TOOLS), 5), 2, sent)
    cm.evaluate(cm.current_tokens(messages, TOOLS), messages)


def test_a_turn_at_20000_messages_reads_what_changed_not_what_is_held():
    cm = manager()
    messages = start(cm, 10_000, wrap=Watched)
    for i in range(10_000, 10_003):  # the first turn sizes and encodes every message once
        bookkeeping(cm, messages, i)
    Watched.reads = 0
    for i in range(10_003, 10_008):
        bookkeeping(cm, messages, i)
    # Walking the conversation in each step read all 20,000 messages a turn (~90 ms); a turn
    # reads only the messages it added. The time it takes is in benchmarks/overhead.py.
    assert Watched.reads / 5 < 100, f"{Watched.reads / 5:.0f} message reads a turn"


def test_masking_at_20000_messages_reads_the_results_it_masks_not_what_is_held():
    cm = manager()
    messages = start(cm, 10_000, size=600, wrap=Watched)  # results worth masking
    Watched.reads = 0
    cm.mask(messages, ["c10", "c20"])
    assert Watched.reads < 100, f"{Watched.reads} message reads to mask two results"
    assert [m["content"] for m in messages if m.get("tool_call_id") in ("c10", "c20")] == [
        conv.placeholder(cm.observations["c10"]),
        conv.placeholder(cm.observations["c20"]),
    ]
    assert cm.current_tokens(messages, TOOLS) == walked(cm, messages)


def test_the_running_sums_match_a_walk_through_appends_counts_masks_and_cuts():
    cm = manager(limit=6000, keep_recent_observations=1, mask_batch_size=2)
    messages = start(cm, 4, size=2000)
    assert cm.current_tokens(messages, TOOLS) == walked(cm, messages)
    sent = len(messages)
    add_turn(cm, messages, 4, size=2000)
    cm.observe_reply(messages, TOOLS, Usage(4000, 5), 2, sent)  # measured sizes written
    assert None not in messages.tokens[:sent]
    assert messages.tokens[sent:] == [None] * (len(messages) - sent)  # not sent, not counted
    assert cm.current_tokens(messages, TOOLS) == walked(cm, messages)
    decision = cm.evaluate(cm.current_tokens(messages, TOOLS), messages)
    assert decision == Mask(["c0", "c1", "c2", "c3"])  # down to the low-water mark
    before = walked(cm, messages)
    cm.mask(messages, decision.tool_call_ids)  # in place
    assert cm.current_tokens(messages, TOOLS) == walked(cm, messages) < before
    # Asked again: what was masked is not offered twice.
    again = cm.evaluate(cm.budget, messages)
    assert not isinstance(again, Mask) or not set(again.tool_call_ids) & set(decision.tool_call_ids)
    assert body(cm, messages)["messages"] == list(messages)
    messages.drop(len(messages) - 2)  # cut short (as a replay does), then grown anew
    assert cm.current_tokens(messages, TOOLS) == walked(cm, messages)
    add_turn(cm, messages, 5, size=10)
    assert cm.current_tokens(messages, TOOLS) == walked(cm, messages)
    assert body(cm, messages)["messages"] == list(messages)
    taken = set(cm.wire(messages).call_ids)
    assert messages.drop_oldest_turn()  # a turn from the middle: the sums are rebuilt
    assert cm.current_tokens(messages, TOOLS) == walked(cm, messages)
    assert taken <= set(cm.wire(messages).call_ids)  # a dropped turn's ids stay taken
    assert body(cm, messages)["messages"] == list(messages)


def test_fitting_masks_and_drops_as_a_walk_would():
    cm = manager(limit=3000)
    messages = start(cm, 6, size=2000)
    fitted = cm.fit(messages, TOOLS)
    assert fitted.masked[:2] == ["c0", "c1"] and "c5" not in fitted.masked[:5]
    assert fitted.tokens == walked(cm, fitted.messages) <= cm.budget
    assert body(cm, fitted.messages)["messages"] == list(fitted.messages)


def test_the_request_is_the_conversation_as_held_in_one_json_body():
    cm = manager()
    messages = start(cm, 2)
    messages.add_note("continue", 'go on: ünïcode and "quotes"\n')
    # Byte for byte what encoding the whole request at once gives (httpx's `json=`).
    whole = {
        "model": "m",
        "messages": list(messages),
        "tools": TOOLS,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.7,
        "max_tokens": 2048,
    }
    assert (
        CLIENT.request_body(cm.wire(messages), TOOLS)
        == json.dumps(whole, ensure_ascii=False, separators=(",", ":")).encode()
    )
    assert json.loads(CLIENT.request_body(manager().wire([]), []))["messages"] == []


@respx.mock
def test_a_reply_gets_call_ids_the_encoded_conversation_does_not_use():
    calls = (
        'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1",'
        '"function":{"name":"shell","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}\n\n'
        "data: [DONE]\n\n"
    ).encode()
    route = respx.post(CHAT).mock(
        return_value=httpx.Response(
            200, content=calls, headers={"content-type": "text/event-stream"}
        )
    )
    cm = manager()
    messages = start(cm, 2)

    async def go():
        async with ChatClient(CHAT.removesuffix("/v1/chat/completions"), "m") as client:
            return await client.complete(cm.wire(messages), TOOLS)

    reply = asyncio.run(go())
    request = route.calls.last.request
    assert request.headers["content-type"] == "application/json"
    assert json.loads(request.content)["messages"] == list(messages)
    assert reply.tool_calls[0].id not in {"c0", "c1"}


def test_what_follows_each_result_is_what_a_walk_adds_up():
    """The tokens from each maskable result to the end, as a prefix cache would process
    them again, match a walk over the messages."""
    cm = manager()
    messages = conv.Conversation([], cm.worth_masking)
    for i in range(6):
        add_turn(cm, messages, i, size=100 + 50 * i)
    call_ids = list(messages.tally.candidate_sizes())
    assert call_ids == ["c2", "c3", "c4", "c5"]  # the results worth masking
    for call_id in call_ids:
        at = next(i for i, m in enumerate(messages) if m.get("tool_call_id") == call_id)
        walked = sum(
            ledger.message_tokens(m, cm.chars_per_token, cm.per_dense) for m in messages[at:]
        )
        assert messages.tally.suffix(call_id, cm.chars_per_token, cm.per_dense) == walked
