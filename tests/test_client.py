"""ChatClient against respx: the request it sends and how it reads answers and failures."""

import asyncio
import base64
import json

import httpx
import pytest
import respx

from ouroboros.config.urls import normalize_base_url
from ouroboros.errors import (
    AuthError,
    ContextOverflowError,
    EmptyStreamError,
    ModelNotFoundError,
    PermanentModelError,
    ServerUnreachableError,
    ToolsNotSupportedError,
    TransientModelError,
)
from ouroboros.protocols import ToolCall, Usage
from ouroboros.server.client import ChatClient
from ouroboros.server.errors import error_details

BASE = "http://127.0.0.1:11434"
CHAT = f"{BASE}/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "file_read", "parameters": {"type": "object"}}}]


def sse(*chunks, done=True) -> bytes:
    frames = [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks]
    return b"".join(frames) + (b"data: [DONE]\n\n" if done else b"")


def delta(content=None, finish=None, **fields):
    d = dict(fields)
    if content is not None:
        d["content"] = content
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": d, "finish_reason": finish}],
    }


HELLO = sse(
    delta("Hello", role="assistant"),
    delta(" world"),
    delta(finish="stop"),
    {
        "id": "chatcmpl-1",
        "choices": [],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
    },
)


def stream_response(body: bytes, status: int = 200) -> httpx.Response:
    return httpx.Response(status, content=body, headers={"content-type": "text/event-stream"})


def complete(client: ChatClient, messages=MESSAGES, tools=(), on_text=None):
    async def go():
        async with client:
            return await client.complete(list(messages), list(tools), on_text)

    return asyncio.run(go())


def fails_with(error_class, answer, *, model="llama3.2", listing=None):
    """Complete once against a server whose chat endpoint gives `answer` (a response, or an
    exception to raise); `listing` maps paths such as "/v1/models" to their responses."""
    with respx.mock(assert_all_called=False) as router:
        route = router.post(CHAT)
        if isinstance(answer, httpx.Response):
            route.mock(return_value=answer)
        else:
            route.mock(side_effect=answer)
        for path, response in (listing or {}).items():
            router.get(BASE + path).mock(return_value=response)
        with pytest.raises(error_class) as info:
            complete(ChatClient(BASE, model))
    message = info.value.message
    assert "\n" not in message
    return message


# ---- normalize_base_url ------------------------------------------------------------------


@pytest.mark.parametrize(
    "given, expected",
    [
        ("http://127.0.0.1:11434", "http://127.0.0.1:11434"),
        ("http://127.0.0.1:11434/", "http://127.0.0.1:11434"),
        ("http://127.0.0.1:11434/v1", "http://127.0.0.1:11434"),
        ("http://127.0.0.1:11434/v1/", "http://127.0.0.1:11434"),
        ("localhost:11434", "http://localhost:11434"),
        ("localhost", "http://localhost:11434"),
        ("0.0.0.0", "http://127.0.0.1:11434"),
        ("0.0.0.0:8080", "http://127.0.0.1:8080"),
        ("http://0.0.0.0:11434", "http://127.0.0.1:11434"),
        ("https://models.example.com", "https://models.example.com"),
        ("https://example.com/ollama/v1", "https://example.com/ollama"),
        (" http://gpu-box:11434 ", "http://gpu-box:11434"),
        ("https://user:p%40ss@example.com/v1", "https://user:p%40ss@example.com"),
    ],
)
def test_normalize_base_url(given, expected):
    assert normalize_base_url(given) == expected


# ---- the request ---------------------------------------------------------------------------


@respx.mock
def test_request_body_streams_with_usage_tools_and_limits():
    route = respx.post(CHAT).mock(return_value=stream_response(HELLO))
    client = ChatClient(BASE + "/v1/", "llama3.2", temperature=0.2, max_output_tokens=321)
    complete(client, tools=TOOLS)
    body = json.loads(route.calls.last.request.content)
    assert body == {
        "model": "llama3.2",
        "messages": MESSAGES,
        "tools": TOOLS,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.2,
        "max_tokens": 321,
    }
    assert "authorization" not in route.calls.last.request.headers


@respx.mock
def test_credentials_in_the_base_url_are_sent_as_basic_auth():
    route = respx.post(CHAT).mock(return_value=stream_response(HELLO))
    complete(ChatClient(BASE.replace("://", "://proxy:s3cret@") + "/v1", "llama3.2"))
    assert route.calls.last.request.headers["authorization"] == (
        "Basic " + base64.b64encode(b"proxy:s3cret").decode()
    )


@respx.mock
def test_tools_are_left_out_when_there_are_none_and_the_key_is_a_bearer_token():
    route = respx.post(CHAT).mock(return_value=stream_response(HELLO))
    complete(ChatClient(BASE, "llama3.2", api_key="sk-123"))
    request = route.calls.last.request
    assert "tools" not in json.loads(request.content)
    assert request.headers["authorization"] == "Bearer sk-123"


@respx.mock
def test_text_streams_to_on_text_and_the_result_has_text_usage_and_finish():
    respx.post(CHAT).mock(return_value=stream_response(HELLO))
    pieces: list[str] = []
    result = complete(ChatClient(BASE, "llama3.2"), on_text=pieces.append)
    assert pieces == ["Hello", " world"]
    assert result.text == "Hello world"
    assert result.usage == Usage(10, 2)
    assert result.finish_reason == "stop"


@respx.mock
def test_tool_calls_come_back_raw():
    call = {
        "id": "call_x",
        "index": 0,
        "type": "function",
        "function": {"name": "file_read", "arguments": "{bad"},
    }
    respx.post(CHAT).mock(
        return_value=stream_response(
            sse(delta(role="assistant", tool_calls=[call]), delta(finish="tool_calls"))
        )
    )
    result = complete(ChatClient(BASE, "llama3.2"), tools=TOOLS)
    assert result.tool_calls == [ToolCall("call_x", "file_read", "{bad")]


@respx.mock
def test_done_without_a_final_newline_still_counts():
    respx.post(CHAT).mock(return_value=stream_response(HELLO.rstrip(b"\n")))
    assert complete(ChatClient(BASE, "llama3.2")).text == "Hello world"


@respx.mock
def test_done_with_one_newline_and_no_blank_line_still_counts():
    respx.post(CHAT).mock(return_value=stream_response(HELLO[:-1]))
    assert complete(ChatClient(BASE, "llama3.2")).text == "Hello world"


@respx.mock
def test_unicode_line_separators_in_the_text_arrive_whole():
    text = "one\u2028two\u2029three\x85four"  # JSON allows these unescaped; they end no SSE line
    frame = b"data: " + json.dumps(delta(text, role="assistant"), ensure_ascii=False).encode()
    respx.post(CHAT).mock(return_value=stream_response(frame + b"\n\n" + sse(delta(finish="stop"))))
    assert complete(ChatClient(BASE, "llama3.2")).text == text


@respx.mock
def test_events_of_empty_data_between_chunks_are_skipped():
    # the SSE spec gives `data:` alone out as an event with data "": a keep-alive, not JSON
    body = HELLO.replace(b"\n\ndata: ", b"\n\ndata:\n\ndata: \n\ndata: ")
    respx.post(CHAT).mock(return_value=stream_response(body))
    assert complete(ChatClient(BASE, "llama3.2")).text == "Hello world"


@respx.mock
def test_a_chunk_spread_over_several_data_lines_is_read_as_one():
    lines = json.dumps(delta("Hi", role="assistant"), indent=1).encode().split(b"\n")
    frame = b"".join(b"data: " + line + b"\r\n" for line in lines) + b"\r\n"
    respx.post(CHAT).mock(return_value=stream_response(frame + sse(delta(finish="stop"))))
    assert complete(ChatClient(BASE, "llama3.2")).text == "Hi"


@respx.mock
def test_a_server_that_ignores_stream_true_is_read_as_one_completion():
    body = {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "whole"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
    respx.post(CHAT).mock(return_value=httpx.Response(200, json=body))
    result = complete(ChatClient(BASE, "llama3.2"))
    assert (result.text, result.usage) == ("whole", Usage(3, 1))


# ---- failures ------------------------------------------------------------------------------


def test_connection_refused_names_the_server_and_how_to_point_elsewhere():
    message = fails_with(ServerUnreachableError, httpx.ConnectError("Connection refused"))
    assert message == (
        "cannot reach the model server at http://127.0.0.1:11434: is `ollama serve` running "
        "there? (set model.base_url or OLLAMA_HOST to point elsewhere)"
    )


def test_model_not_found_lists_the_models_the_server_has():
    models = httpx.Response(
        200, json={"object": "list", "data": [{"id": "qwen3:8b"}, {"id": "llama3.1:latest"}]}
    )
    message = fails_with(
        ModelNotFoundError,
        httpx.Response(
            404,
            json={"error": {"message": "model 'llama3.2' not found", "type": "not_found_error"}},
        ),
        listing={"/v1/models": models},
    )
    assert "'llama3.2'" in message
    assert "qwen3:8b, llama3.1:latest" in message
    assert "ollama pull llama3.2" in message


def test_model_not_found_falls_back_to_api_tags_for_the_list():
    message = fails_with(
        ModelNotFoundError,
        httpx.Response(404, json={"error": "model 'llama3.2' not found, try pulling it first"}),
        listing={
            "/v1/models": httpx.Response(404, text="404 page not found"),
            "/api/tags": httpx.Response(200, json={"models": [{"name": "mistral:latest"}]}),
        },
    )
    assert "mistral:latest" in message


def test_model_not_found_says_when_the_list_cannot_be_had():
    message = fails_with(
        ModelNotFoundError,
        httpx.Response(404, json={"error": {"message": "model 'llama3.2' not found"}}),
        listing={"/v1/models": httpx.Response(500), "/api/tags": httpx.Response(500)},
    )
    assert "could not list the models" in message
    assert "ollama pull llama3.2" in message


def test_model_not_found_on_a_server_with_no_models():
    message = fails_with(
        ModelNotFoundError,
        httpx.Response(404, json={"error": {"message": "model 'llama3.2' not found"}}),
        listing={"/v1/models": httpx.Response(200, json={"data": []})},
    )
    assert "has no models" in message


def test_model_without_tool_support():
    message = fails_with(
        ToolsNotSupportedError,
        httpx.Response(
            400,
            json={
                "error": {
                    "message": "registry.ollama.ai/library/gemma:latest does not support tools"
                }
            },
        ),
        model="gemma",
    )
    assert "gemma does not support tools" in message
    assert "tool support" in message


@pytest.mark.parametrize(
    "body",
    [
        {
            "error": {
                "message": "the prompt is longer than the context length currently available to the model"
            }
        },
        {
            "error": {
                "message": "This model's maximum context length is 2048 tokens.",
                "code": "context_length_exceeded",
            }
        },
        {"error": {"message": "request too large", "code": "context_length_exceeded"}},
        {"error": "prompt is too long"},
    ],
)
def test_prompt_too_long_is_a_context_overflow(body):
    message = fails_with(ContextOverflowError, httpx.Response(400, json=body))
    assert "did not fit" in message


@pytest.mark.parametrize("status", [401, 403])
def test_auth_failures_point_at_the_api_key_setting(status):
    message = fails_with(
        AuthError, httpx.Response(status, json={"error": {"message": "invalid api key"}})
    )
    assert "model.api_key_env" in message
    assert "invalid api key" in message


@pytest.mark.parametrize("status", [429, 500, 502, 503])
def test_rate_limits_and_server_errors_are_transient(status):
    message = fails_with(TransientModelError, httpx.Response(status, text="upstream overloaded"))
    assert str(status) in message
    assert "upstream overloaded" in message


def test_other_client_errors_are_permanent_and_carry_the_servers_message():
    message = fails_with(
        PermanentModelError,
        httpx.Response(
            400,
            json={
                "error": {"message": "invalid tool call arguments", "type": "invalid_request_error"}
            },
        ),
    )
    assert "400: invalid tool call arguments" in message


def test_read_timeout_is_transient():
    message = fails_with(TransientModelError, httpx.ReadTimeout("timed out"))
    assert "sent nothing" in message


class _ResetMidStream(httpx.AsyncByteStream):
    async def __aiter__(self):
        yield sse(delta("partial", role="assistant"), done=False)
        raise httpx.ReadError("Connection reset by peer")


def test_connection_reset_mid_stream_is_transient():
    message = fails_with(TransientModelError, httpx.Response(200, stream=_ResetMidStream()))
    assert "Connection reset by peer" in message


def test_a_stream_that_ends_without_done_is_transient():
    message = fails_with(
        TransientModelError, stream_response(HELLO.replace(b"data: [DONE]\n\n", b""))
    )
    assert "without [DONE]" in message


def test_a_stream_cut_in_the_middle_of_a_chunk_failed_mid_answer():
    body = sse(delta("Hi", role="assistant"), done=False) + b'data: {"choices": [{"ind'
    message = fails_with(TransientModelError, stream_response(body))
    assert "ended without [DONE] after 1 chunks" in message


def test_an_unparseable_chunk_is_transient():
    body = (
        sse(delta("Hi", role="assistant"), done=False)
        + b"data: {not json\n\n"
        + sse(delta(finish="stop"))
    )
    message = fails_with(TransientModelError, stream_response(body))
    assert "{not json" in message


def test_an_error_event_inside_the_stream_is_classified():
    body = sse(
        {"error": {"code": 400, "message": "the request exceeds the available context size"}},
        done=False,
    )
    fails_with(ContextOverflowError, stream_response(body))
    body = sse({"error": {"message": "model crashed"}}, done=False)
    assert "model crashed" in fails_with(TransientModelError, stream_response(body))


@pytest.mark.parametrize(
    "body",
    [b"", b": ping\n\n", b"data:\n\n", b"data: [DONE]\n\n"],
    ids=["nothing", "ping", "empty-data", "done-only"],
)
def test_200_with_no_data_is_an_empty_stream(body):
    message = fails_with(EmptyStreamError, stream_response(body))
    assert "empty stream" in message


def test_error_details_reads_every_body_shape():
    assert error_details('{"error":{"message":"boom","code":"c1"}}') == ("boom", "c1")
    assert error_details('{"error":"plain"}') == ("plain", None)
    assert error_details('{"detail":"fastapi style"}') == ("fastapi style", None)
    assert error_details("Bad Gateway\n<html>") == ("Bad Gateway", None)  # one line only
    assert error_details("") == ("(no message)", None)
    assert len(error_details("x" * 1000)[0]) == 200


def count_prompt(client: ChatClient):
    async def go():
        async with client:
            return await client.prompt_tokens(list(MESSAGES), list(TOOLS))

    return asyncio.run(go())


@respx.mock
def test_prompt_tokens_asks_for_one_token_without_streaming():
    route = respx.post(CHAT).mock(
        return_value=httpx.Response(
            200,
            json={
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "a"},
                        "finish_reason": "length",
                    }
                ],
                "usage": {"prompt_tokens": 221, "completion_tokens": 1, "total_tokens": 222},
            },
        )
    )
    assert count_prompt(ChatClient(BASE, "m")) == 221
    sent = json.loads(route.calls[0].request.content)
    assert sent["stream"] is False and sent["max_tokens"] == 1 and "stream_options" not in sent
    assert sent["messages"] == MESSAGES and sent["tools"] == TOOLS


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(200, json={"choices": []}),  # no usage
        httpx.Response(200, json={"usage": {"prompt_tokens": 0}}),
        httpx.Response(200, text="not json"),
        httpx.Response(500, json={"error": {"message": "boom"}}),
        httpx.Response(404, json={"error": {"message": "model 'm' not found"}}),
    ],
)
@respx.mock
def test_prompt_tokens_is_none_when_the_server_does_not_say(response):
    respx.post(CHAT).mock(return_value=response)
    respx.get(f"{BASE}/v1/models").mock(return_value=httpx.Response(200, json={"data": []}))
    assert count_prompt(ChatClient(BASE, "m")) is None


@respx.mock
def test_prompt_tokens_passes_on_the_servers_words_when_the_prompt_does_not_fit():
    respx.post(CHAT).mock(
        return_value=httpx.Response(
            400,
            json={
                "error": {
                    "message": "This model's maximum context length is 2048 tokens. However, you "
                    "requested 2914 tokens.",
                    "code": "context_length_exceeded",
                }
            },
        )
    )
    with pytest.raises(ContextOverflowError, match="maximum context length is 2048 tokens"):
        count_prompt(ChatClient(BASE, "m"))


@respx.mock
def test_prompt_tokens_tries_a_fresh_connection_once():
    """llama.cpp closes the kept-alive connection after an empty stream."""
    respx.post(CHAT).mock(
        side_effect=[
            httpx.ReadError("connection reset"),
            httpx.Response(
                400,
                json={
                    "error": {
                        "message": "This model's maximum context length is 2048 tokens.",
                        "code": "context_length_exceeded",
                    }
                },
            ),
        ]
    )
    with pytest.raises(ContextOverflowError, match="2048 tokens"):
        count_prompt(ChatClient(BASE, "m"))
