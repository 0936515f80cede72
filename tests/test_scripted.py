"""The scripted server: its wire rendering (pure) and its behaviour over loopback."""

import asyncio
import json
import socket
import threading
import time

import httpx
import pytest

from ouroboros.protocols import Usage
from ouroboros.server.chunks import StreamAccumulator, parse_data
from ouroboros.server.discovery import discover_context_limit, model_supports_tools
from ouroboros.server.sse import SSEDecoder
from ouroboros.testing import (
    DONE_FRAME,
    SCRIPT_FINISHED,
    Fault,
    Reply,
    ScriptedServer,
    ServerTokenizer,
    render_stream,
    split_text,
    usage_wire,
)


def chunks_of(frames: list[bytes]) -> list[dict]:
    assert all(f.startswith(b"data: ") and f.endswith(b"\n\n") for f in frames)
    return [parse_data(f[6:-2].decode()) for f in frames if f != DONE_FRAME]


def choice(chunk):
    (only,) = chunk["choices"]
    return only


# ---- rendering ----------------------------------------------------------------------------


def test_split_text_streams_word_pieces_that_join_back():
    assert split_text("Hello big  world\n") == ["Hello", " big", "  world", "\n"]
    assert split_text("") == []
    for text in ["a", " lead", "trail ", "x\n\ny", "🐍 é"]:
        assert "".join(split_text(text)) == text


def test_current_wire_role_once_finish_alone_usage_last():
    frames = render_stream(
        Reply("Hi there"), model="m", usage=usage_wire(7, 2), request_number=3, created=5
    )
    assert frames[-1] == DONE_FRAME
    chunks = chunks_of(frames)
    assert all(
        c["id"] == "chatcmpl-3" and c["model"] == "m" and c["system_fingerprint"] == "fp_ollama"
        for c in chunks
    )
    assert all(c["object"] == "chat.completion.chunk" and c["created"] == 5 for c in chunks)
    deltas = [choice(c)["delta"] for c in chunks[:-1]]
    assert deltas == [{"role": "assistant", "content": "Hi"}, {"content": " there"}, {}]
    assert [choice(c)["finish_reason"] for c in chunks[:-1]] == [None, None, "stop"]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}


def test_legacy_wire_role_everywhere_and_stop_even_after_tool_calls():
    frames = render_stream(Reply("Hi there", [("f", {"a": 1})]), model="m", wire="legacy")
    chunks = chunks_of(frames)
    assert all(
        choice(c)["delta"]["role"] == "assistant" and "content" in choice(c)["delta"]
        for c in chunks
    )
    assert [choice(c)["finish_reason"] for c in chunks] == [None, None, "stop"]
    (call,) = choice(chunks[-1])["delta"]["tool_calls"]
    assert call["function"] == {"name": "f", "arguments": '{"a":1}'}


def test_whole_tool_calls_come_in_one_chunk_with_indexes():
    frames = render_stream(Reply("", [("a", {"x": 1}), ("b", "{broken")]), model="m")
    chunks = chunks_of(frames)
    (call_chunk,) = [c for c in chunks if "tool_calls" in choice(c)["delta"]]
    calls = choice(call_chunk)["delta"]["tool_calls"]
    assert [(c["index"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        (0, "a", '{"x":1}'),
        (1, "b", "{broken"),
    ]
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in calls)
    assert choice(chunks[-1])["finish_reason"] == "tool_calls"


def test_fragmented_tool_calls_send_id_and_name_first_then_argument_pieces():
    arguments = {"path": "notes/a long file name.txt"}
    chunks = chunks_of(
        render_stream(Reply("", [("file_read", arguments)]), model="m", fragment_tool_calls=True)
    )
    pieces = [
        choice(c)["delta"]["tool_calls"][0] for c in chunks if "tool_calls" in choice(c)["delta"]
    ]
    assert pieces[0]["id"].startswith("call_") and pieces[0]["function"] == {
        "name": "file_read",
        "arguments": "",
    }
    assert len(pieces) > 3
    assert all(
        "id" not in p and "name" not in p["function"] and p["index"] == 0 for p in pieces[1:]
    )
    assert json.loads("".join(p["function"]["arguments"] for p in pieces)) == arguments


def test_no_usage_chunk_without_usage_and_no_done_when_asked():
    frames = render_stream(Reply("x"), model="m", done=False)
    assert DONE_FRAME not in frames
    assert all(c["choices"] for c in chunks_of(frames))


def test_an_empty_reply_still_has_a_delta_and_a_finish():
    chunks = chunks_of(render_stream(Reply(), model="m"))
    assert choice(chunks[0])["delta"] == {"role": "assistant", "content": ""}
    assert choice(chunks[-1])["finish_reason"] == "stop"


@pytest.mark.parametrize("wire", ["current", "legacy"])
@pytest.mark.parametrize("fragment", [False, True])
def test_rendered_bytes_fed_byte_by_byte_decode_back_to_the_reply(wire, fragment):
    reply = Reply("Ünïcode 🐍 text", [("a", {"k": "v é"}), ("b", "raw")], reasoning="hmm")
    data = b"".join(
        render_stream(
            reply, model="m", wire=wire, fragment_tool_calls=fragment, usage=usage_wire(3, 4)
        )
    )
    decoder, accumulator = SSEDecoder(), StreamAccumulator()
    for i in range(len(data)):
        for payload in decoder.feed(data[i : i + 1]):
            chunk = parse_data(payload)
            if chunk is not None:
                accumulator.feed(chunk)
    result = accumulator.result()
    assert (result.text, result.reasoning, result.usage) == ("Ünïcode 🐍 text", "hmm", Usage(3, 4))
    assert [(c.name, c.arguments) for c in result.tool_calls] == [
        ("a", '{"k":"v \\u00e9"}'),
        ("b", "raw"),
    ]


# ---- the server over loopback -------------------------------------------------------------


def chat(server, messages, *, tools=None, stream=True, include_usage=True, model="scripted"):
    body = {"model": model, "messages": messages, "stream": stream}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    if tools:
        body["tools"] = tools
    return httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=30)


def streamed(response) -> list[dict]:
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    assert response.headers["transfer-encoding"] == "chunked"
    text = response.text
    assert text.endswith("data: [DONE]\n\n")
    return [json.loads(line[6:]) for line in text.split("\n\n") if line and line != "data: [DONE]"]


def text_of(chunks) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


USER = [{"role": "user", "content": "hello"}]


def test_list_script_one_item_per_request_then_script_finished(scripted_server):
    server = scripted_server([Reply("one"), Reply("two")])
    assert [text_of(streamed(chat(server, USER))) for _ in range(3)] == [
        "one",
        "two",
        SCRIPT_FINISHED,
    ]
    assert [r["messages"] for r in server.requests] == [USER] * 3


def test_a_lazy_endless_script_is_read_as_needed(scripted_server):
    def forever():
        n = 0
        while True:
            n += 1
            yield Reply(f"reply {n}")

    server = scripted_server(forever())
    assert text_of(streamed(chat(server, USER))) == "reply 1"
    assert text_of(streamed(chat(server, USER))) == "reply 2"


def test_brain_gets_the_messages(scripted_server):
    seen = []

    def brain(messages):
        seen.append(messages)
        return Reply(f"you said {messages[-1]['content']}")

    server = scripted_server(brain)
    assert text_of(streamed(chat(server, USER))) == "you said hello"
    assert seen == [USER]


def test_usage_only_when_asked_and_enabled(scripted_server):
    server = scripted_server([Reply("a"), Reply("b")])
    assert "usage" in streamed(chat(server, USER))[-1]
    assert all("usage" not in c for c in streamed(chat(server, USER, include_usage=False)))
    quiet = scripted_server([Reply("a")], send_usage=False)
    assert all("usage" not in c for c in streamed(chat(quiet, USER)))


def test_count_tokens_is_deterministic_and_counts_everything():
    server = ScriptedServer([], tokenizer=ServerTokenizer("characters", len, per_message=4))
    messages = [
        {"role": "system", "content": "abcd"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "ab", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "xy"}]},
    ]
    tools = [{"type": "function"}]
    chars = 4 + 2 + 2 + 2 + len(json.dumps(tools))
    assert server.count_tokens(messages, tools) == chars + 12
    assert server.count_tokens([], None) == 0


def test_prompt_tokens_recorded_for_every_request(scripted_server):
    server = scripted_server([Reply("a")])
    server.inject(Fault("status"))
    chat(server, USER)
    chat(server, USER + [{"role": "user", "content": "one two three, four"}])
    assert server.prompt_tokens == [1 + 3, 1 + 3 + 5 + 3]  # words and punctuation, 3 per message
    assert len(server.requests) == 2


def long_conversation():
    return [{"role": "system", "content": " ".join(["s"] * 11)}] + [
        {"role": "user" if n % 2 else "assistant", "content": " ".join([f"w{n}"] * 11)}
        for n in range(10)
    ]  # every message is 11 words + 3 = 14 tokens: 154 in all


def test_truncate_drops_whole_messages_from_the_front_keeping_system_and_last(scripted_server):
    seen = []
    server = scripted_server(
        lambda messages: seen.append(messages) or Reply("ok"), context_length=60
    )
    conversation = long_conversation()
    chunks = streamed(chat(server, conversation))
    assert server.prompt_tokens == [154]
    assert server.over_limit == 1
    # what the model saw: the system message and the newest messages that fit in 60
    assert seen == [[conversation[0]] + conversation[-3:]]
    assert chunks[-1]["usage"]["prompt_tokens"] == 56


def test_truncate_keeps_the_last_message_even_when_it_alone_is_too_big(scripted_server):
    seen = []
    server = scripted_server(
        lambda messages: seen.append(messages) or Reply("ok"), context_length=20
    )
    conversation = [{"role": "user", "content": "a"}, {"role": "user", "content": "b" * 350}]
    chunks = streamed(chat(server, conversation))
    assert seen == [conversation[-1:]]
    assert chunks[-1]["usage"]["prompt_tokens"] == 20  # what did not fit was cut


def test_no_overflow_below_the_limit_or_without_a_limit(scripted_server):
    for limit in (1000, None):
        server = scripted_server([Reply("ok")], context_length=limit)
        chunks = streamed(chat(server, long_conversation()))
        assert chunks[-1]["usage"]["prompt_tokens"] == 154
        assert server.over_limit == 0


def test_overflow_error_is_ollamas_400(scripted_server):
    server = scripted_server([Reply("kept for later")], context_length=60, overflow="error")
    response = chat(server, long_conversation())
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "the prompt is longer than the context length currently available to the model"
    )
    assert server.over_limit == 1
    assert text_of(streamed(chat(server, USER))) == "kept for later"


def test_overflow_empty_is_llama_cpps_empty_200_and_400_when_not_streaming(scripted_server):
    server = scripted_server([Reply("x")], context_length=60, overflow="empty")
    response = chat(server, long_conversation())
    assert (response.status_code, response.content) == (200, b"")
    whole = chat(server, long_conversation(), stream=False)
    assert whole.status_code == 400
    assert whole.json()["error"]["code"] == "context_length_exceeded"
    assert server.over_limit == 2


def test_overflow_named_is_vllms_400_naming_the_window_streaming_or_not(scripted_server):
    server = scripted_server([Reply("x")], context_length=60, overflow="named")
    for stream in (True, False):
        response = chat(server, long_conversation(), stream=stream)
        assert response.status_code == 400
        assert "maximum context length is 60 tokens" in response.json()["error"]["message"]


def test_miscount_reports_counts_off_from_the_nth_request_on(scripted_server):
    """A server counting 40 % low from its second request: its counts, streamed or asked
    for, are 0.6 of the true ones, which `prompt_tokens` keeps."""
    server = scripted_server([Reply("a"), Reply("b")], miscount=(0.6, 2))
    first = streamed(chat(server, long_conversation()))[-1]["usage"]["prompt_tokens"]
    body = {"model": "scripted", "messages": long_conversation(), "stream": False, "max_tokens": 1}
    asked = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=30)
    second = chat(server, long_conversation(), stream=False, include_usage=False)
    assert first == 154
    assert asked.json()["usage"]["prompt_tokens"] == round(0.6 * 154)  # for request 2
    assert second.json()["usage"]["prompt_tokens"] == round(0.6 * 154)
    assert server.prompt_tokens == [154, 154]


def test_unknown_model_and_tools_refusals(scripted_server):
    server = scripted_server([Reply("x")], tools_supported=False)
    missing = chat(server, USER, model="nope")
    assert missing.status_code == 404
    assert missing.json()["error"] == {
        "message": "model 'nope' not found",
        "type": "not_found_error",
        "param": None,
        "code": None,
    }
    refused = chat(server, USER, tools=[{"type": "function", "function": {"name": "f"}}])
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == "scripted does not support tools"


def test_injected_faults_come_before_the_script_in_order(scripted_server):
    server = scripted_server([Reply("first reply")])
    server.inject(Fault("status", 502, "bad gateway"), Fault("empty"))
    failed = chat(server, USER)
    assert failed.status_code == 502
    assert failed.json()["error"]["message"] == "bad gateway"
    assert chat(server, USER).content == b""
    assert text_of(streamed(chat(server, USER))) == "first reply"


def test_faults_in_the_script_take_their_turn(scripted_server):
    server = scripted_server([Fault("status", 500), Reply("after")])
    assert chat(server, USER).status_code == 500
    assert text_of(streamed(chat(server, USER))) == "after"


def test_garbage_and_no_done_faults_on_the_wire(scripted_server):
    server = scripted_server([])
    server.inject(Fault("garbage"), Fault("no_done"))
    garbage = chat(server, USER).text
    assert "data: {not json\n\n" in garbage and garbage.endswith("data: [DONE]\n\n")
    no_done = chat(server, USER).text
    assert '"finish_reason":"stop"' in no_done and "[DONE]" not in no_done


def test_drop_cuts_the_chunked_body_short(scripted_server):
    server = scripted_server([])
    server.inject(Fault("drop"))
    with pytest.raises(httpx.RemoteProtocolError):
        chat(server, USER)


def test_slow_delays_then_answers_from_the_script(scripted_server):
    server = scripted_server([Reply("eventually")])
    server.inject(Fault("slow", seconds=0.3))
    started = time.monotonic()
    assert text_of(streamed(chat(server, USER))) == "eventually"
    assert time.monotonic() - started >= 0.3


def test_outage_refuses_then_comes_back_on_the_same_port(scripted_server):
    server = scripted_server([Reply("back")])
    port = server.port
    server.inject(Fault("outage", seconds=600))  # returns once the socket is closed
    with pytest.raises(httpx.ConnectError):
        chat(server, USER)
    server.end_outage()
    for _ in range(6000):  # no timing assumptions: poll until it is back (or a minute passed)
        try:
            response = chat(server, USER)
            break
        except httpx.ConnectError:
            time.sleep(0.01)
    assert server.port == port
    assert text_of(streamed(response)) == "back"


def test_outage_closes_kept_alive_connections_too(scripted_server):
    server = scripted_server([])
    with httpx.Client(base_url=server.base_url) as client:
        assert client.get("/").status_code == 200  # read whole: the connection stays open
        server.inject(Fault("outage", seconds=60))
        with pytest.raises(httpx.ConnectError):
            client.get("/")


def test_stop_during_an_outage_returns_promptly(scripted_server):
    server = scripted_server([])
    server.inject(Fault("outage", seconds=3600))
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.base_url + "/")
    stopping = threading.Thread(target=server.stop, daemon=True)
    stopping.start()
    stopping.join(timeout=10)
    assert not stopping.is_alive(), "stop() is waiting for the hour-long outage to end"


def test_stop_closes_the_socket():
    with ScriptedServer([]) as server:
        assert httpx.get(server.base_url + "/").text == "Ollama is running"
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=5).close()


def test_ollama_endpoints(scripted_server):
    server = scripted_server([Reply("x")], context_length=8192, extra_models=["qwen3:8b"])
    get = lambda path: httpx.get(server.base_url + path)  # noqa: E731
    assert get("/").text == "Ollama is running"
    assert "version" in get("/api/version").json()
    assert [m["name"] for m in get("/api/tags").json()["models"]] == ["scripted:latest", "qwen3:8b"]
    assert [m["id"] for m in get("/v1/models").json()["data"]] == ["scripted:latest", "qwen3:8b"]
    assert get("/api/ps").json() == {"models": []}
    assert get("/nothing").status_code == 404
    shown = httpx.post(server.base_url + "/api/show", json={"model": "scripted"}).json()
    assert shown["model_info"]["general.architecture"] == "llama"
    assert shown["model_info"]["llama.context_length"] == 131072
    assert "num_ctx" in shown["parameters"] and "8192" in shown["parameters"]
    assert shown["capabilities"] == ["completion", "tools"]
    assert httpx.post(server.base_url + "/api/show", json={"model": "nope"}).status_code == 404
    streamed(chat(server, USER))
    (loaded,) = get("/api/ps").json()["models"]
    assert (loaded["name"], loaded["context_length"]) == ("scripted:latest", 8192)


def test_discovery_against_the_scripted_server(scripted_server):
    server = scripted_server([Reply("x")], context_length=6000)
    found = asyncio.run(discover_context_limit(server.base_url, "scripted", 0))
    assert found == (6000, "num_ctx in the model's Modelfile (/api/show)")
    streamed(chat(server, USER))
    found = asyncio.run(discover_context_limit(server.base_url, "scripted", 0))
    assert found == (6000, "allocated by Ollama (/api/ps)")
    assert asyncio.run(model_supports_tools(server.base_url, "scripted")) is True
    no_tools = scripted_server([], tools_supported=False)
    assert asyncio.run(model_supports_tools(no_tools.base_url, "scripted")) is False


def test_ollama_allocated_less_than_advertised_honest_or_silent(scripted_server):
    honest = scripted_server([Reply("a"), Reply("b")], context_length=8192, allocated=2048)
    silent = scripted_server([Reply("a")], context_length=8192, allocated=2048, api_ps="silent")
    for server in (honest, silent):
        chat(server, USER)
    ps = httpx.get(f"{honest.base_url}/api/ps").json()["models"]
    assert ps[0]["context_length"] == 2048
    assert httpx.get(f"{silent.base_url}/api/ps").json()["models"] == []
    show = httpx.post(f"{honest.base_url}/api/show", json={"model": "scripted"}).json()
    assert "num_ctx                        8192" in show["parameters"]  # what it advertises


def test_a_server_restarted_bigger_mid_run(scripted_server):
    server = scripted_server([Reply("a"), Reply("b")], context_length=2048, grows=(1, 8192))
    chat(server, USER)
    assert httpx.get(f"{server.base_url}/api/ps").json()["models"][0]["context_length"] == 2048
    chat(server, USER)
    assert httpx.get(f"{server.base_url}/api/ps").json()["models"][0]["context_length"] == 8192
