"""ChatClient against the ScriptedServer over loopback: real sockets, real bytes."""

import asyncio
import json

import pytest

from ouroboros.errors import (
    ContextOverflowError,
    EmptyStreamError,
    ModelNotFoundError,
    PermanentModelError,
    ServerUnreachableError,
    ToolsNotSupportedError,
    TransientModelError,
)
from ouroboros.server.client import ChatClient
from ouroboros.server.retry import RetryPolicy, with_retries
from ouroboros.testing import Fault, Reply

USER = [{"role": "user", "content": "go"}]
TOOLS = [{"type": "function", "function": {"name": "file_read", "parameters": {"type": "object"}}}]


def run(server, calls, *, model="scripted", **options):
    """Make the requests `calls` describes ([(messages, tools)]) on one client; return the
    results or the exceptions, and the text pieces streamed."""

    async def go():
        outcomes, pieces = [], []
        async with ChatClient(server.base_url, model, **options) as client:
            for messages, tools in calls:
                try:
                    outcomes.append(await client.complete(messages, tools, pieces.append))
                except Exception as error:  # noqa: BLE001 - the tests look at it
                    outcomes.append(error)
        return outcomes, pieces

    return asyncio.run(go())


@pytest.mark.parametrize("usage", [True, False], ids=["usage", "no-usage"])
@pytest.mark.parametrize("fragment", [False, True], ids=["whole", "fragmented"])
@pytest.mark.parametrize("wire", ["current", "legacy"])
def test_every_wire_shape_reads_the_same(scripted_server, wire, fragment, usage):
    server = scripted_server(
        [
            Reply(
                "Let me look. Ünïcode 🐍 too.",
                [("file_read", {"path": "a.txt"}), ("shell", '{"command": "ls')],
            ),
            Reply("All done."),
        ],
        wire=wire,
        fragment_tool_calls=fragment,
        send_usage=usage,
    )
    (first, second), pieces = run(server, [(USER, TOOLS), (USER, TOOLS)])
    assert first.text == "Let me look. Ünïcode 🐍 too."
    assert [(c.name, c.arguments) for c in first.tool_calls] == [
        ("file_read", '{"path":"a.txt"}'),
        ("shell", '{"command": "ls'),
    ]
    assert len({c.id for c in first.tool_calls}) == 2
    assert all(c.id.startswith("call_") for c in first.tool_calls)
    assert first.finish_reason == "tool_calls"
    assert second.text == "All done." and second.tool_calls == []
    assert second.finish_reason == "stop"
    assert "".join(pieces) == first.text + second.text
    assert len(pieces) > 2  # streamed in pieces, not at once
    if usage:
        assert first.usage.prompt_tokens == server.prompt_tokens[0]
        assert first.usage.completion_tokens > 0
    else:
        assert first.usage is None and second.usage is None


def test_one_connection_serves_every_reply(scripted_server):
    server = scripted_server([Reply("one"), Reply("two"), Reply("three")])
    outcomes, _ = run(server, [(USER, None)] * 3)
    assert [o.text for o in outcomes] == ["one", "two", "three"]
    assert server.connections_opened == 1


def test_reasoning_arrives_apart_from_text(scripted_server):
    server = scripted_server([Reply("42.", reasoning="Six times seven.")])
    (result,), pieces = run(server, [(USER, [])])
    assert result.reasoning == "Six times seven."
    assert result.text == "42."
    assert pieces == ["42."]


def test_the_server_receives_what_the_client_sends(scripted_server):
    server = scripted_server([Reply("ok")])
    run(server, [(USER, TOOLS)], max_output_tokens=99)
    (body,) = server.requests
    assert body["messages"] == USER
    assert body["tools"] == TOOLS
    assert body["max_tokens"] == 99
    assert body["stream_options"] == {"include_usage": True}


# ---- faults -------------------------------------------------------------------------------


def test_status_faults_then_recovery_on_the_same_client(scripted_server):
    server = scripted_server([Reply("finally")])
    server.inject(Fault("status", 503, "server busy"), Fault("status", 400, "bad thing"))
    (busy, bad, ok), _ = run(server, [(USER, [])] * 3)
    assert isinstance(busy, TransientModelError) and "503: server busy" in str(busy)
    assert isinstance(bad, PermanentModelError) and "400: bad thing" in str(bad)
    assert ok.text == "finally"


def test_drop_mid_stream_is_transient(scripted_server):
    server = scripted_server([Reply("after")])
    server.inject(Fault("drop"))
    (dropped, ok), pieces = run(server, [(USER, [])] * 2)
    assert isinstance(dropped, TransientModelError)
    assert not isinstance(dropped, EmptyStreamError)
    assert "broke" in str(dropped)
    assert pieces[:1] == ["This"]  # some text had streamed before the drop
    assert ok.text == "after"


def test_garbage_chunk_is_transient(scripted_server):
    server = scripted_server([Reply("after")])
    server.inject(Fault("garbage"))
    (garbage, ok), _ = run(server, [(USER, [])] * 2)
    assert isinstance(garbage, TransientModelError) and "{not json" in str(garbage)
    assert ok.text == "after"


def test_no_done_is_transient(scripted_server):
    server = scripted_server([Reply("after")])
    server.inject(Fault("no_done"))
    (cut, ok), _ = run(server, [(USER, [])] * 2)
    assert isinstance(cut, TransientModelError) and "without [DONE]" in str(cut)
    assert ok.text == "after"


def test_empty_200_is_an_empty_stream(scripted_server):
    server = scripted_server([Reply("after")])
    server.inject(Fault("empty"))
    (empty, ok), _ = run(server, [(USER, [])] * 2)
    assert isinstance(empty, EmptyStreamError)
    assert ok.text == "after"


def test_slow_first_byte_times_out(scripted_server):
    server = scripted_server([Reply("late")])
    server.inject(Fault("slow", seconds=60))
    (slow,), _ = run(server, [(USER, [])], timeout_secs=0.3)
    assert isinstance(slow, TransientModelError)
    assert "took longer than 0.3 s (model.request_timeout_secs)" in str(slow)


def test_slow_but_within_the_timeout_still_answers(scripted_server):
    server = scripted_server([Reply("late")])
    server.inject(Fault("slow", seconds=0.05))
    (result,), _ = run(server, [(USER, [])], timeout_secs=60)
    assert result.text == "late"


def test_outage_refuses_connections(scripted_server):
    server = scripted_server([Reply("before"), Reply("after")])

    async def go():
        async with ChatClient(server.base_url, "scripted") as client:
            before = await client.complete(USER, [])
            server.inject(Fault("outage", seconds=60))
            with pytest.raises(ServerUnreachableError) as refused:
                await client.complete(USER, [])
            return before, refused.value

    before, refused = asyncio.run(go())
    assert before.text == "before"
    assert server.base_url in str(refused)
    assert len(server.requests) == 1


def test_outage_from_the_script_starts_right_after_the_reply_before_it(scripted_server):
    server = scripted_server([Reply("before"), Fault("outage", seconds=60), Reply("after")])
    (before, refused), _ = run(server, [(USER, [])] * 2)
    assert before.text == "before"
    assert isinstance(refused, ServerUnreachableError)


def test_retries_ride_out_an_outage(scripted_server):
    server = scripted_server([Reply("back")])
    server.inject(Fault("outage", seconds=0.3))
    failures = []

    async def go():
        async with ChatClient(server.base_url, "scripted") as client:
            return await with_retries(
                lambda: client.complete(USER, []),
                RetryPolicy(max_retry_secs=120, base_delay=0.1, max_delay=0.5),
                on_retry=lambda n, delay, error: failures.append(error),
            )

    assert asyncio.run(go()).text == "back"
    assert failures and all(isinstance(e, ServerUnreachableError) for e in failures)


# ---- refusals -----------------------------------------------------------------------------


def test_unknown_model_lists_the_servers_models(scripted_server):
    server = scripted_server([], extra_models=["qwen3:8b"])
    (missing,), _ = run(server, [(USER, [])], model="llama3.2")
    assert isinstance(missing, ModelNotFoundError)
    assert "scripted:latest, qwen3:8b" in str(missing)
    assert "ollama pull llama3.2" in str(missing)


def test_tagged_model_name_is_the_same_model(scripted_server):
    server = scripted_server([Reply("hi")])
    (result,), _ = run(server, [(USER, [])], model="scripted:latest")
    assert result.text == "hi"


def test_tools_on_a_model_without_tools(scripted_server):
    server = scripted_server([Reply("hi")], tools_supported=False)
    (refused, ok), _ = run(server, [(USER, TOOLS), (USER, [])])
    assert isinstance(refused, ToolsNotSupportedError)
    assert ok.text == "hi"


def big_prompt(n=40):
    return [{"role": "system", "content": "rules"}] + [
        {"role": "user", "content": "x" * 100} for _ in range(n)
    ]


def test_overflow_error_mode_is_a_context_overflow(scripted_server):
    server = scripted_server([Reply("fits")], context_length=200, overflow="error")
    (too_long, ok), _ = run(server, [(big_prompt(), []), (USER, [])])
    assert isinstance(too_long, ContextOverflowError)
    assert ok.text == "fits"  # the refused request did not use up the reply


def test_overflow_empty_mode_is_an_empty_stream(scripted_server):
    server = scripted_server([Reply("fits")], context_length=200, overflow="empty")
    (too_long, ok), _ = run(server, [(big_prompt(), []), (USER, [])])
    assert isinstance(too_long, EmptyStreamError)
    assert ok.text == "fits"


def test_overflow_truncate_mode_reports_fewer_prompt_tokens_than_sent(scripted_server):
    server = scripted_server([Reply("fits")], context_length=200)
    (result,), _ = run(server, [(big_prompt(), [])])
    assert result.text == "fits"
    assert result.usage.prompt_tokens <= 200 < server.prompt_tokens[0]
    assert server.over_limit == 1


def test_non_streaming_requests_get_a_whole_completion(scripted_server):
    import httpx

    server = scripted_server([Reply("whole", [("f", {"a": 1})])])
    body = {"model": "scripted", "messages": USER, "stream": False}
    response = httpx.post(server.base_url + "/v1/chat/completions", json=body)
    completion = response.json()
    assert completion["object"] == "chat.completion"
    message = completion["choices"][0]["message"]
    assert message["content"] == "whole"
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"a": 1}
    assert completion["choices"][0]["finish_reason"] == "tool_calls"
    assert completion["usage"]["prompt_tokens"] == server.prompt_tokens[0]
