import json

import pytest

from ouroboros.server.sse import EventDecoder, LineSplitter, SSEDecoder


def pieces(data: bytes, step: int | None) -> list[bytes]:
    return [data] if step is None else [data[i : i + step] for i in range(0, len(data), step)]


def split_all(data: bytes, step: int | None = None) -> list[str]:
    splitter = LineSplitter()
    lines = [line for piece in pieces(data, step) for line in splitter.feed(piece)]
    return lines + splitter.close()


def events_of(lines: list[str]) -> list[str]:
    decoder = EventDecoder()
    found = [data for line in lines if (data := decoder.feed(line)) is not None]
    last = decoder.close()
    return found + ([last] if last is not None else [])


def decode_all(data: bytes, step: int | None = None) -> list[str]:
    decoder = SSEDecoder()
    found = [event for piece in pieces(data, step) for event in decoder.feed(piece)]
    return found + decoder.close()


# ---- lines -------------------------------------------------------------------------------


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
@pytest.mark.parametrize("step", [None, 1, 2, 3])
def test_lines_end_with_lf_crlf_or_a_lone_cr_however_the_bytes_are_split(ending, step):
    data = b"".join(line + ending for line in [b"data: a", b"", b": ping", b"data: b", b""])
    assert split_all(data, step) == ["data: a", "", ": ping", "data: b", ""]


def test_unicode_line_separators_inside_a_line_do_not_end_it():
    line = 'data: {"t":"a\u2028b\u2029c\x85d\x0be\x0cf\x1cg"}'
    assert split_all(line.encode() + b"\n") == [line]


def test_utf8_characters_split_across_reads_are_reassembled():
    line = "data: héllo 🐍 世界"
    for step in (1, 2, 3, 5):
        assert split_all(line.encode() + b"\n", step) == [line]


def test_a_trailing_cr_waits_to_learn_whether_an_lf_follows():
    splitter = LineSplitter()
    assert splitter.feed(b"data: a\r") == []
    assert splitter.feed(b"\ndata: b\r") == ["data: a"]
    assert splitter.feed(b"data: c\n") == ["data: b", "data: c"]


def test_a_partial_line_is_held_until_its_end_arrives():
    splitter = LineSplitter()
    assert splitter.feed(b'data: {"a"') == []
    assert splitter.feed(b":1}\n") == ['data: {"a":1}']


def test_close_gives_the_last_line_without_an_ending_once():
    splitter = LineSplitter()
    assert splitter.feed(b"data: a\n\ndata: [DONE]") == ["data: a", ""]
    assert splitter.close() == ["data: [DONE]"]
    assert splitter.close() == []


def test_a_cr_at_the_very_end_of_the_stream_ends_a_line():
    splitter = LineSplitter()
    assert splitter.feed(b"data: a\r\r") == ["data: a"]
    assert splitter.close() == [""]


# ---- events ------------------------------------------------------------------------------


def test_the_data_lines_of_one_event_are_joined_with_newlines():
    assert events_of(["data: {", 'data: "a": 1', "data: }", ""]) == ['{\n"a": 1\n}']


def test_a_blank_line_ends_each_event():
    assert events_of(["data: a", "", "data: b", ""]) == ["a", "b"]


def test_comments_and_other_fields_are_ignored():
    lines = [": ping", "event: message", "id: 3", "retry: 100", "data: a", ": more", "foo: x", ""]
    assert events_of(lines) == ["a"]


def test_one_space_after_the_colon_is_dropped_and_no_more():
    assert events_of(["data:a", "", "data: b", "", "data:  c", ""]) == ["a", "b", " c"]


def test_a_blank_line_without_data_dispatches_nothing():
    assert events_of(["", ": ping", "", "event: x", ""]) == []


def test_a_data_field_without_value_is_an_empty_line_of_data():
    assert events_of(["data", ""]) == [""]
    assert events_of(["data:", "data", "data: x", ""]) == ["\n\nx"]


def test_an_event_without_its_blank_line_is_still_given_out_at_the_end():
    assert events_of(["data: a", "", "data: [DONE]"]) == ["a", "[DONE]"]
    assert events_of(["data: one", "data: two"]) == ["one\ntwo"]


def test_a_colon_inside_the_value_belongs_to_the_value():
    assert events_of(['data: {"a": "b:c"}', ""]) == ['{"a": "b:c"}']


# ---- the wire shapes, bytes to events ------------------------------------------------------

OLLAMA = b'data: {"n":1}\n\ndata: {"n":2}\n\ndata: [DONE]\n\n'
LLAMA_CPP = b': ping\n\ndata:{"n":1}\n\nevent: message\nid: 3\ndata:{"n":2}\n\ndata: [DONE]\n\n'
CRLF = b'data: {"n":1}\r\n\r\n: keep-alive\r\ndata: {"n":2}\r\n\r\ndata: [DONE]\r\n\r\n'
BARE_CR = b'data: {"n":1}\r\rdata: {"n":2}\r\r: ping\rdata: [DONE]\r\r'
NO_LAST_BLANK = b'data: {"n":1}\n\ndata: {"n":2}\n\ndata: [DONE]\n'


@pytest.mark.parametrize(
    "stream",
    [OLLAMA, LLAMA_CPP, CRLF, BARE_CR, NO_LAST_BLANK],
    ids=["lflf", "llama.cpp", "crlf", "cr", "no-last-blank"],
)
@pytest.mark.parametrize("step", [None, 1, 2, 3, 7])
def test_every_wire_shape_gives_the_same_events_however_split(stream, step):
    assert decode_all(stream, step) == ['{"n":1}', '{"n":2}', "[DONE]"]


def test_a_multi_line_json_event_decodes_whole():
    stream = b'data: {"choices":\r\ndata: []}\r\n\r\ndata: [DONE]\r\n\r\n'
    assert [json.loads(e) for e in decode_all(stream, 1)[:1]] == [{"choices": []}]


def test_events_come_out_as_soon_as_their_blank_line_arrives():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n") == []
    assert decoder.feed(b"\ndata: b") == ["a"]
    assert decoder.close() == ["b"]
    assert decoder.close() == []
