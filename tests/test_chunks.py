import json

import pytest

from ouroboros.protocols import ToolCall, Usage, call_ids_in
from ouroboros.server.chunks import (
    MalformedChunk,
    StreamAccumulator,
    assign_call_ids,
    parse_data,
    without_surrogates,
)

# ---- payloads -----------------------------------------------------------------------------


def test_parse_data():
    assert parse_data("[DONE]") is None
    assert parse_data(" [DONE] ") is None
    assert parse_data('{"choices": []}') == {"choices": []}
    with pytest.raises(ValueError):
        parse_data("{not json")
    with pytest.raises(MalformedChunk, match="the chunk is an array, not an object"):
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
            {
                "id": "chatcmpl-1",
                "choices": [],
                "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
            },
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
        {
            "id": "call_a",
            "index": 0,
            "type": "function",
            "function": {"name": "file_read", "arguments": '{"path":"a.txt"}'},
        },
        {
            "id": "call_b",
            "index": 1,
            "type": "function",
            "function": {"name": "shell", "arguments": '{"command":"ls"}'},
        },
    ]
    result, _ = accumulate(
        [chunk({"role": "assistant", "tool_calls": calls}), chunk({}, "tool_calls")]
    )
    assert result.tool_calls == [
        ToolCall("call_a", "file_read", '{"path":"a.txt"}'),
        ToolCall("call_b", "shell", '{"command":"ls"}'),
    ]
    assert result.finish_reason == "tool_calls"


def test_fragmented_tool_calls_are_merged_by_index():
    fragments = [
        [
            {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": "file_read", "arguments": ""},
            }
        ],
        [{"index": 0, "function": {"arguments": '{"pa'}}],
        [{"index": 0, "function": {"arguments": 'th": "a'}}],
        [
            {
                "index": 1,
                "id": "call_2",
                "type": "function",
                "function": {"name": "shell", "arguments": '{"comm'},
            }
        ],
        [{"index": 0, "function": {"arguments": '.txt"}'}}],  # interleaved: still call 0
        [{"index": 1, "function": {"arguments": 'and": "ls"}'}}],
    ]
    result, _ = accumulate(
        [chunk({"tool_calls": f}) for f in fragments] + [chunk({}, "tool_calls")]
    )
    assert result.tool_calls == [
        ToolCall("call_1", "file_read", '{"path": "a.txt"}'),
        ToolCall("call_2", "shell", '{"command": "ls"}'),
    ]


def test_calls_without_id_come_back_without_one_for_the_client_to_assign():
    result, _ = accumulate(
        [
            chunk({"tool_calls": [{"index": 0, "function": {"name": "a", "arguments": "{}"}}]}),
            chunk({"tool_calls": [{"index": 1, "function": {"name": "b", "arguments": "{}"}}]}),
        ]
    )
    assert [(c.id, c.name) for c in result.tool_calls] == [("", "a"), ("", "b")]


def test_a_new_id_at_a_used_index_is_a_new_call():
    # some servers number the calls of every chunk from 0
    result, _ = accumulate(
        [
            chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "call_a", "function": {"name": "a", "arguments": "{}"}}
                    ]
                }
            ),
            chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "call_b", "function": {"name": "b", "arguments": "{}"}}
                    ]
                }
            ),
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
            chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "x", "function": {"name": "a", "arguments": "{broken"}}
                    ]
                }
            ),
            chunk(
                {
                    "tool_calls": [
                        {"index": 1, "id": "y", "function": {"name": "b", "arguments": {"k": 1}}}
                    ]
                }
            ),
        ]
    )
    assert result.tool_calls[0].arguments == "{broken"
    assert json.loads(result.tool_calls[1].arguments) == {"k": 1}


def test_older_ollama_stop_after_tool_calls_reads_as_tool_calls():
    call = {"id": "c", "index": 0, "function": {"name": "a", "arguments": "{}"}}
    result, _ = accumulate(
        [chunk({"role": "assistant", "content": "", "tool_calls": [call]}, "stop")]
    )
    assert result.finish_reason == "tool_calls"
    plain, _ = accumulate([chunk({"role": "assistant", "content": "hi"}, "stop")])
    assert plain.finish_reason == "stop"


def test_counts_chunks_and_survives_chunks_without_choices():
    accumulator = StreamAccumulator()
    accumulator.feed({"id": "x"})
    accumulator.feed({"choices": None, "usage": None})
    assert accumulator.chunks == 2
    assert accumulator.result().text == ""


@pytest.mark.parametrize(
    "usage,expected",
    [
        ({"prompt_tokens": 12, "completion_tokens": 3}, Usage(12, 3)),
        ({"prompt_tokens": 0, "completion_tokens": 3}, Usage(None, 3)),  # cached: unknown, not 0
        ({"prompt_tokens": None, "completion_tokens": 3}, Usage(None, 3)),
        ({"completion_tokens": 3, "total_tokens": 3}, Usage(None, 3)),
        ({"prompt_tokens": "12", "completion_tokens": -1}, Usage(None, None)),
        # Nonsense kept for the window's judge, which warns of it (not silently unknown).
        ({"prompt_tokens": -7, "completion_tokens": 3}, Usage(-7, 3)),
        (
            {
                "prompt_tokens": 40,
                "completion_tokens": 2,
                "prompt_tokens_details": {"cached_tokens": 32},
            },
            Usage(40, 2, cached_tokens=32),
        ),
        (
            {
                "prompt_tokens": 40,
                "completion_tokens": 2,
                "prompt_tokens_details": {"cached_tokens": 0},
            },
            Usage(40, 2, cached_tokens=0),
        ),
    ],
)
def test_usage_counts_that_say_nothing_are_unknown(usage, expected):
    result, _ = accumulate(
        [chunk({"content": "ok"}, "stop"), {"id": "chatcmpl-1", "choices": [], "usage": usage}]
    )
    assert result.usage == expected


# ---- malformed chunks, lone surrogates, progress ---------------------------------------------


@pytest.mark.parametrize(
    "payload, where",
    [
        ("[1, 2]", "the chunk is an array, not an object"),
        ('"ping"', "the chunk is a string, not an object"),
        ("null", "the chunk is null, not an object"),
        ("42", "the chunk is a number, not an object"),
    ],
)
def test_a_chunk_that_is_json_but_not_an_object_is_malformed(payload, where):
    with pytest.raises(MalformedChunk, match=where):
        parse_data(payload)


@pytest.mark.parametrize(
    "bad, where",
    [
        ({"choices": {"0": {}}}, "choices is an object, not an array"),
        ({"choices": ["hi"]}, "choices[0] is a string, not an object"),
        ({"choices": [{"delta": "hi"}]}, "choices[0].delta is a string, not an object"),
        (
            {"choices": [{"delta": {"content": 5}}]},
            "choices[0].delta.content is a number, not a string",
        ),
        ({"choices": [{"delta": {"reasoning": ["a"]}}]}, "choices[0].delta.reasoning is an array"),
        (
            {"choices": [{"delta": {"tool_calls": {"index": 0}}}]},
            "choices[0].delta.tool_calls is an object, not an array",
        ),
        (
            {"choices": [{"delta": {"tool_calls": ["x"]}}]},
            "choices[0].delta.tool_calls[0] is a string",
        ),
        (
            {"choices": [{"delta": {"tool_calls": [{"function": "f"}]}}]},
            "choices[0].delta.tool_calls[0].function is a string, not an object",
        ),
        (
            {"choices": [{"delta": {"tool_calls": [{"function": {"arguments": 5}}]}}]},
            "choices[0].delta.tool_calls[0].function.arguments is a number, not a string or an object",
        ),
        (
            {"choices": [{"delta": {"tool_calls": [{"function": {"name": True}}]}}]},
            "function.name is a boolean, not a string",
        ),
        (
            {"choices": [{"delta": {"tool_calls": [{"id": 7, "function": {}}]}}]},
            "tool_calls[0].id is a number",
        ),
        (
            {"choices": [{"delta": {"tool_calls": [{"index": [0]}]}}]},
            "tool_calls[0].index is an array",
        ),
        ({"choices": [{"delta": {}, "finish_reason": 1}]}, "choices[0].finish_reason is a number"),
    ],
)
def test_a_field_of_the_wrong_type_is_named_and_nothing_of_the_chunk_is_taken(bad, where):
    accumulator = StreamAccumulator()
    accumulator.feed(chunk({"content": "kept"}))
    with pytest.raises(MalformedChunk, match=where.replace("[", r"\[").replace("]", r"\]")):
        accumulator.feed(bad)
    assert accumulator.result().text == "kept" and accumulator.chunks == 1


def test_lone_surrogates_become_replacement_characters_everywhere():
    payload = json.dumps(
        {
            "choices": [
                {
                    "delta": {
                        "content": "a\ud800b",
                        "reasoning": "\udfff",
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "c\ud801",
                                "function": {"name": "n", "arguments": "{}"},
                            }
                        ],
                    }
                }
            ]
        }
    )
    assert "\\ud800" in payload  # escaped on the wire, as JSON writers do
    result, _ = accumulate([parse_data(payload)])
    assert (result.text, result.reasoning, result.tool_calls[0].id) == (
        "a\ufffdb",
        "\ufffd",
        "c\ufffd",
    )
    json.dumps(result.text, ensure_ascii=False).encode("utf-8")  # storable


def test_a_valid_surrogate_pair_is_kept():
    assert parse_data(json.dumps({"t": "🐍"}))["t"] == "🐍"
    assert without_surrogates({"k": ["\ud83d", "ok"]}) == {"k": ["\ufffd", "ok"]}


def test_a_lone_surrogate_escaped_inside_tool_arguments_is_replaced_too():
    arguments = json.dumps({"content": "x\udc00y"})  # JSON text holding the escape \\udc00
    result, _ = accumulate(
        [
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "c",
                            "function": {"name": "file_write", "arguments": arguments},
                        }
                    ]
                }
            )
        ]
    )
    assert json.loads(result.tool_calls[0].arguments) == {"content": "x\ufffdy"}
    result.tool_calls[0].arguments.encode("utf-8")


def test_progress_counts_only_chunks_that_carry_something():
    accumulator = StreamAccumulator()
    for empty in (
        chunk({"role": "assistant"}),
        chunk({}),
        chunk({"content": ""}),
        {"id": "x"},
        {"choices": []},
    ):
        accumulator.feed(empty)
    assert accumulator.progress == 0
    for carrying in (
        chunk({"content": "a"}),
        chunk({"reasoning": "r"}),
        chunk({}, "stop"),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}),
        {"choices": [], "usage": {"prompt_tokens": 3}},
    ):
        accumulator.feed(carrying)
    assert accumulator.progress == 5


# ---- tool calls without ids ------------------------------------------------------------------


def test_whole_calls_without_ids_at_one_index_are_told_apart_by_complete_arguments():
    result, _ = accumulate(
        [
            chunk(
                {"tool_calls": [{"index": 0, "function": {"name": "a", "arguments": '{"n": 1}'}}]}
            ),
            chunk(
                {"tool_calls": [{"index": 0, "function": {"name": "b", "arguments": '{"n": 2}'}}]}
            ),
        ]
    )
    assert [(c.name, c.arguments) for c in result.tool_calls] == [
        ("a", '{"n": 1}'),
        ("b", '{"n": 2}'),
    ]


def test_fragmented_calls_without_ids_or_index_are_split_at_each_new_name():
    pieces = [
        {"name": "a", "arguments": ""},
        {"arguments": '{"p": '},
        {"arguments": '"x"}'},
        {"name": "b", "arguments": '{"q"'},
        {"arguments": ": 1}"},
    ]
    result, _ = accumulate([chunk({"tool_calls": [{"function": p}]}) for p in pieces])
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("", "a", '{"p": "x"}'),
        ("", "b", '{"q": 1}'),
    ]


def test_a_name_repeated_mid_arguments_is_not_a_new_call():
    pieces = [{"name": "a", "arguments": '{"p": '}, {"name": "a", "arguments": '"x"}'}]
    result, _ = accumulate([chunk({"tool_calls": [{"index": 0, "function": p}]}) for p in pieces])
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("a", '{"p": "x"}')]


def test_assign_call_ids_fills_missing_and_replaces_repeated_ids():
    fresh = iter(["call_new1", "call_used", "call_new2", "call_new3"])
    calls = [
        ToolCall("", "a", "{}"),
        ToolCall("call_1", "b", "{}"),
        ToolCall("call_1", "c", "{}"),
        ToolCall("call_9", "d", "{}"),
    ]
    assigned = assign_call_ids(calls, {"call_used", "call_9"}, new_id=lambda: next(fresh))
    assert [c.id for c in assigned] == ["call_new1", "call_1", "call_new2", "call_new3"]
    assert [c.name for c in assigned] == ["a", "b", "c", "d"]


def test_generated_ids_are_unique_and_call_ids_in_reads_calls_and_results():
    messages = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "x", "type": "function", "function": {}}],
        },
        {"role": "tool", "tool_call_id": "y", "content": ""},
        {"role": "user", "content": "z"},
    ]
    assert call_ids_in(messages) == {"x", "y"}
    ids = [c.id for c in assign_call_ids([ToolCall("", "a", "{}")] * 50, set())]
    assert len(set(ids)) == 50 and all(i.startswith("call_") for i in ids)
