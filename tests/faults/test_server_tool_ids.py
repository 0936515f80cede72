"""Tool-call ids are unique in a conversation, whatever the server sends: none at all, or one
id for every call (issue 10, item 7). Through the client over a loopback socket, and through
the real `ouroboros run`, where each result must answer the call that asked for it."""

from __future__ import annotations

import asyncio

import pytest

from ouroboros.server.client import ChatClient
from tests.faults.servers import CallsWithoutIds, run_against, start_server
from tests.helpers import of_type, run_events

TWO_CALLS = [("file_read", {"path": "a.txt"}), ("list_dir", {"path": "."})]


@pytest.mark.parametrize("same_id", [None, "call_1"], ids=["no-ids", "one-id-for-all"])
def test_fragmented_calls_get_ids_unique_in_the_reply_and_the_conversation(same_id):
    async def go():
        messages = [{"role": "user", "content": "go"}]
        async with ChatClient(server.base_url, "scripted") as client:
            for _ in range(2):
                reply = await client.complete(list(messages), [])
                messages.append(reply.to_message())
                messages += [
                    {"role": "tool", "tool_call_id": call.id, "content": "ok"}
                    for call in reply.tool_calls
                ]
        return messages

    acts = [CallsWithoutIds(calls=TWO_CALLS, same_id=same_id)] * 2
    with start_server(acts) as server:
        messages = asyncio.run(go())

    calls = [call for m in messages for call in m.get("tool_calls", [])]
    assert [c["function"]["name"] for c in calls] == ["file_read", "list_dir"] * 2
    assert [c["function"]["arguments"] for c in calls[:2]] == ['{"path": "a.txt"}', '{"path": "."}']
    ids = [c["id"] for c in calls]
    assert len(set(ids)) == 4 and all(ids), ids


def test_each_result_answers_its_own_call_across_turns(tmp_path):
    turns = [
        [
            ("file_write", {"path": f"f{n}.txt", "content": f"content {n}"}),
            ("file_read", {"path": f"f{n}.txt"}),
        ]
        for n in range(3)
    ]
    with start_server([CallsWithoutIds(calls=calls) for calls in turns]) as server:
        result = run_against(tmp_path, server, {}, max_turns=4)  # the 4th request sees all

    assert result.returncode == 3, result.stderr
    events = run_events(tmp_path)
    ids = [e["id"] for e in of_type(events, "tool_call")]
    assert len(ids) == 7 and len(set(ids)) == 7, ids  # and the 4th reply's list_dir
    # What the model was sent last: every result follows its call, under the call's id.
    messages = server.chat_requests()[3]["body"]["messages"]
    asked = {
        c["id"]: c["function"]["arguments"]
        for m in messages
        if m["role"] == "assistant"
        for c in m.get("tool_calls", [])
    }
    results = [m for m in messages if m["role"] == "tool"]
    assert len(results) == 6
    for n, message in enumerate(results):
        path = f"f{n // 2}.txt"
        assert path in asked[message["tool_call_id"]]
        expected = "wrote" if n % 2 == 0 else f"content {n // 2}"
        assert expected in message["content"], (n, message["content"])
