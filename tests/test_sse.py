import json

import pytest

from ouroboros.protocols import ToolCall, Usage
from ouroboros.sse import SSEDecoder, StreamAccumulator, data_payload, iter_sse_data, parse_data


def feed_all(decoder: SSEDecoder, data: bytes, *, step: int | None = None) -> list[str]:
    pieces = [data] if step is None else [data[i : i + step] for i in range(0, len(data), step)]
    payloads = []
    for piece in pieces:
        payloads += decoder.feed(piece)
    return payloads + decoder.close()


# ---- lines -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line, payload",
    [
        ('data: {"a":1}', '{"a":1}'),
        ('data:{"a":1}', '{"a":1}'),
        ("data:  two spaces", " two spaces"),
        ("data: [DONE]", "[DONE]"),
        (": ping", None),
        (": ping - 2025-01-01 00:00:00", None),
        ("event: message", None),
        ("id: 7", None),
        ("retry: 100", None),
        ("", None),
        ("data:", None),
        ("data: ", None),
    ],
)
def test_data_payload(line, payload):
    assert data_payload(line) == payload


def test_iter_sse_data_takes_split_lines_with_or_without_endings():
    lines = ["data: a\r\n", ": ping\n", "", "event: x", "data:b", "data: [DONE]\n"]
    assert list(iter_sse_data(lines)) == ["a", "b", "[DONE]"]


# ---- the incremental decoder --------------------------------------------------------------

OLLAMA = b'data: {"n":1}\n\ndata: {"n":2}\n\ndata: [DONE]\n\n'
LLAMA_CPP = b': ping\ndata:{"n":1}\nevent: message\nid: 3\ndata:{"n":2}\ndata: [DONE]\n'
CRLF = b'data: {"n":1}\r\n\r\n: keep-alive\r\ndata: {"n":2}\r\n\r\ndata: [DONE]\r\n\r\n'
BARE_CR = b'data: {"n":1}\r\rdata: {"n":2}\rdata: [DONE]\r'


@pytest.mark.parametrize("stream", [OLLAMA, LLAMA_CPP, CRLF, BARE_CR], ids=["lflf", "lf", "crlf", "cr"])
@pytest.mark.parametrize("step", [None, 1, 2, 3, 7])
def test_decoder_yields_each_data_payload_however_the_bytes_are_split(stream, step):
    assert feed_all(SSEDecoder(), stream, step=step) == ['{"n":1}', '{"n":2}', "[DONE]"]


def test_decoder_reassembles_utf8_characters_split_across_reads():
    text = "héllo 🐍 世界"
    stream = b"data: " + json.dumps({"t": text}, ensure_ascii=False).encode() + b"\n\n"
    for step in (1, 2, 3, 5):
        payloads = feed_all(SSEDecoder(), stream, step=step)
        assert [json.loads(p)["t"] for p in payloads] == [text]


def test_decoder_waits_after_a_trailing_cr_until_it_knows_whether_lf_follows():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\ndata: b\r") == ["a"]
    assert decoder.feed(b"data: c\n") == ["b", "c"]


def test_decoder_holds_a_partial_line_until_its_end_arrives():
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"a"') == []
    assert decoder.feed(b":1}\n\n") == ['{"a":1}']


def test_decoder_close_returns_a_last_line_without_an_ending():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\ndata: [DONE]") == ["a"]
    assert decoder.close() == ["[DONE]"]
    assert decoder.close() == []


# ---- payloads -----------------------------------------------------------------------------


def test_parse_data():
    assert parse_data("[DONE]") is None
    assert parse_data(" [DONE] ") is None
    assert parse_data('{"choices": []}') == {"choices": []}
    with pytest.raises(ValueError):
        parse_data("{not json")
    with pytest.raises(ValueError, match="JSON object"):
        parse_data("[1, 2]")


# ---- accumulation -------------------------------------------------------------------------


def chunk(delta=None, finish=None, **extra):
    body = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m", **extra}
    if delta is not None or finish is not None:
        body["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    return body


def accumulate(chunks):
    accumulator = StreamAccumulator()
    added = [accumulator.feed(c) for c in chunks]
    return accumulator.result(), added


def test_current_wire_role_once_and_a_separate_finish_chunk():
    result, added = accumulate(
        [
            chunk({"role": "assistant", "content": "Hel"}),
            chunk({"content": "lo"}),
            chunk({}, "stop"),
            {"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}},
        ]
    )
    assert result.text == "Hello"
    assert added == ["Hel", "lo", "", ""]
    assert result.finish_reason == "stop"
    assert result.usage == Usage(12, 3)
    assert result.tool_calls == []


def test_legacy_wire_role_in_every_delta_and_finish_on_the_last_content_chunk():
    result, _ = accumulate(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"role": "assistant", "content": "Hi"}),
            chunk({"role": "assistant", "content": " there"}, "length"),
        ]
    )
    assert result.text == "Hi there"
    assert result.finish_reason == "length"
    assert result.usage is None


def test_null_content_and_null_usage_in_every_chunk():
    result, added = accumulate(
        [
            chunk({"role": "assistant", "content": None}, usage=None),
            chunk({"content": "ok"}, usage=None),
            chunk({}, "stop", usage={"prompt_tokens": 5, "completion_tokens": 1}),
            chunk({"content": None}, usage=None),
        ]
    )
    assert result.text == "ok"
    assert added == ["", "ok", "", ""]
    assert result.usage == Usage(5, 1)


def test_reasoning_is_kept_apart_from_the_text():
    result, added = accumulate(
        [
            chunk({"role": "assistant", "reasoning": "Let me "}),
            chunk({"reasoning_content": "think."}),
            chunk({"content": "Answer."}),
        ]
    )
    assert result.reasoning == "Let me think."
    assert result.text == "Answer."
    assert added == ["", "", "Answer."]


def test_ollama_sends_several_whole_tool_calls_in_one_chunk():
    calls = [
        {"id": "call_a", "index": 0, "type": "function", "function": {"name": "file_read", "arguments": '{"path":"a.txt"}'}},
        {"id": "call_b", "index": 1, "type": "function", "function": {"name": "shell", "arguments": '{"command":"ls"}'}},
    ]
    result, _ = accumulate([chunk({"role": "assistant", "tool_calls": calls}), chunk({}, "tool_calls")])
    assert result.tool_calls == [
        ToolCall("call_a", "file_read", '{"path":"a.txt"}'),
        ToolCall("call_b", "shell", '{"command":"ls"}'),
    ]
    assert result.finish_reason == "tool_calls"


def test_fragmented_tool_calls_are_merged_by_index():
    fragments = [
        [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "file_read", "arguments": ""}}],
        [{"index": 0, "function": {"arguments": '{"pa'}}],
        [{"index": 0, "function": {"arguments": 'th": "a'}}],
        [{"index": 1, "id": "call_2", "type": "function", "function": {"name": "shell", "arguments": '{"comm'}}],
        [{"index": 0, "function": {"arguments": '.txt"}'}}],  # interleaved: still call 0
        [{"index": 1, "function": {"arguments": 'and": "ls"}'}}],
    ]
    result, _ = accumulate([chunk({"tool_calls": f}) for f in fragments] + [chunk({}, "tool_calls")])
    assert result.tool_calls == [
        ToolCall("call_1", "file_read", '{"path": "a.txt"}'),
        ToolCall("call_2", "shell", '{"command": "ls"}'),
    ]


def test_calls_without_id_get_generated_ids():
    result, _ = accumulate(
        [
            chunk({"tool_calls": [{"index": 0, "function": {"name": "a", "arguments": "{}"}}]}),
            chunk({"tool_calls": [{"index": 1, "function": {"name": "b", "arguments": "{}"}}]}),
        ]
    )
    assert [(c.id, c.name) for c in result.tool_calls] == [("call_0", "a"), ("call_1", "b")]


def test_a_new_id_at_a_used_index_is_a_new_call():
    # some servers number the calls of every chunk from 0
    result, _ = accumulate(
        [
            chunk({"tool_calls": [{"index": 0, "id": "call_a", "function": {"name": "a", "arguments": "{}"}}]}),
            chunk({"tool_calls": [{"index": 0, "id": "call_b", "function": {"name": "b", "arguments": "{}"}}]}),
        ]
    )
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("call_a", "a", "{}"),
        ("call_b", "b", "{}"),
    ]


def test_calls_without_index_are_told_apart_by_id():
    result, _ = accumulate(
        [
            chunk({"tool_calls": [{"id": "call_a", "function": {"name": "a", "arguments": "{"}}]}),
            chunk({"tool_calls": [{"function": {"arguments": "}"}}]}),
            chunk({"tool_calls": [{"id": "call_b", "function": {"name": "b", "arguments": "{}"}}]}),
        ]
    )
    assert [(c.id, c.arguments) for c in result.tool_calls] == [("call_a", "{}"), ("call_b", "{}")]


def test_arguments_stay_raw_even_when_not_json_and_objects_become_json_text():
    result, _ = accumulate(
        [
            chunk({"tool_calls": [{"index": 0, "id": "x", "function": {"name": "a", "arguments": "{broken"}}]}),
            chunk({"tool_calls": [{"index": 1, "id": "y", "function": {"name": "b", "arguments": {"k": 1}}}]}),
        ]
    )
    assert result.tool_calls[0].arguments == "{broken"
    assert json.loads(result.tool_calls[1].arguments) == {"k": 1}


def test_older_ollama_stop_after_tool_calls_reads_as_tool_calls():
    call = {"id": "c", "index": 0, "function": {"name": "a", "arguments": "{}"}}
    result, _ = accumulate([chunk({"role": "assistant", "content": "", "tool_calls": [call]}, "stop")])
    assert result.finish_reason == "tool_calls"
    plain, _ = accumulate([chunk({"role": "assistant", "content": "hi"}, "stop")])
    assert plain.finish_reason == "stop"


def test_counts_chunks_and_survives_chunks_without_choices():
    accumulator = StreamAccumulator()
    accumulator.feed({"id": "x"})
    accumulator.feed({"choices": None, "usage": None})
    assert accumulator.chunks == 2
    assert accumulator.result().text == ""


@pytest.mark.parametrize("usage,expected", [
    ({"prompt_tokens": 12, "completion_tokens": 3}, Usage(12, 3)),
    ({"prompt_tokens": 0, "completion_tokens": 3}, Usage(None, 3)),  # cached: unknown, not 0
    ({"prompt_tokens": None, "completion_tokens": 3}, Usage(None, 3)),
    ({"completion_tokens": 3, "total_tokens": 3}, Usage(None, 3)),
    ({"prompt_tokens": "12", "completion_tokens": -1}, Usage(None, None)),
    ({"prompt_tokens": 40, "completion_tokens": 2,
      "prompt_tokens_details": {"cached_tokens": 32}}, Usage(40, 2, cached_tokens=32)),
    ({"prompt_tokens": 40, "completion_tokens": 2,
      "prompt_tokens_details": {"cached_tokens": 0}}, Usage(40, 2)),
])
def test_usage_counts_that_say_nothing_are_unknown(usage, expected):
    result, _ = accumulate([chunk({"content": "ok"}, "stop"),
                            {"id": "chatcmpl-1", "choices": [], "usage": usage}])
    assert result.usage == expected
