"""A tool call cut off at max_tokens (finish_reason "length", its arguments not whole JSON) is
answered as such and never run, and the history sent back holds well-formed arguments for it:
llama.cpp's server answers 500 to a history with arguments it cannot parse, every time. A
server error repeated for the same request is the answer to it: the run stops after two tries
with one line instead of retrying until model.max_retry_secs runs out."""

from __future__ import annotations

import json

import pytest

from ouroboros.protocols import ToolCall
from ouroboros.server.chunks import StreamAccumulator
from ouroboros.server.errors import answered_for_good
from ouroboros.testing import Fault, Reply
from tests.helpers import make_project, of_type, ouroboros_here, run_events

CUT = '{"path": "notes/a.txt", "content": "the start of a long no'


@pytest.mark.parametrize("fragment", [True, False])
def test_a_call_cut_at_max_tokens_is_answered_as_cut_off_and_not_run(
    tmp_path, scripted_server, fragment
):
    server = scripted_server(
        [
            Reply("", [("file_write", CUT)], finish_reason="length"),
            Reply("", [("list_dir", {"path": "."})]),
            Reply("Done."),
        ],
        rejects_unparsed_arguments=True,
        fragment_tool_calls=fragment,
    )
    config = make_project(tmp_path, server.base_url)
    ran = ouroboros_here("run", "-c", str(config), "--headless", "--max-turns", "3")

    assert ran.returncode == 3, ran.stdout[-1500:]
    assert not (tmp_path / "workspace" / "notes").exists()  # not run
    second = server.requests[1]["messages"]
    call = next(m for m in second if m.get("tool_calls"))["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {}
    answer = next(m for m in second if m["role"] == "tool")["content"]
    assert "cut off" in answer and "not run" in answer and "max_tokens" in answer
    events = run_events(tmp_path)
    assert of_type(events, "assistant")[0]["tool_calls"][0]["arguments"] == CUT  # as sent
    result = of_type(events, "tool_result")[0]
    assert not result["ok"] and "cut off" in result["summary"]
    assert not of_type(events, "retry")


def test_broken_arguments_not_cut_off_are_answered_as_broken_and_sent_back_well_formed(
    tmp_path, scripted_server
):
    server = scripted_server(
        [Reply("", [("list_dir", '{"path": .}')]), Reply("Done.")], rejects_unparsed_arguments=True
    )
    config = make_project(tmp_path, server.base_url)
    ran = ouroboros_here("run", "-c", str(config), "--headless", "--max-turns", "2")

    assert ran.returncode == 3, ran.stdout[-1500:]
    second = server.requests[1]["messages"]
    answer = next(m for m in second if m["role"] == "tool")["content"]
    assert "not valid JSON" in answer and "cut off" not in answer


def test_a_server_error_repeated_for_the_same_request_stops_the_run_after_two_tries(
    tmp_path, scripted_server
):
    server = scripted_server([Reply("Thinking.")])
    for _ in range(3):
        server.inject(Fault("status", 500, "Failed to parse tool call arguments as JSON"))
    config = make_project(tmp_path, server.base_url, model={"max_retry_secs": 30})
    ran = ouroboros_here("run", "-c", str(config), "--headless", "--max-turns", "1")

    assert ran.returncode == 2, ran.stdout[-1500:]
    assert len(server.requests) == 2
    error = [line for line in ran.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "twice to the same request" in error[0]
    assert "Traceback" not in ran.stderr


@pytest.mark.parametrize(
    "status,repeated,for_good",
    [(500, True, True), (500, False, False), (502, True, True), (503, True, False)],
)
def test_which_server_errors_are_the_answer_for_good(status, repeated, for_good):
    assert answered_for_good(status, repeated) is for_good


def stream_of(arguments: str, finish: str) -> ToolCall:
    accumulator = StreamAccumulator()
    accumulator.feed(
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "file_write", "arguments": arguments},
                            }
                        ]
                    },
                }
            ]
        }
    )
    accumulator.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return accumulator.result().tool_calls[0]


def test_only_a_call_that_does_not_parse_in_a_reply_cut_at_the_limit_is_cut_off():
    assert stream_of(CUT, "length").cut_off
    assert not stream_of('{"path": "a"}', "length").cut_off
    assert not stream_of(CUT, "tool_calls").cut_off


def test_the_history_sends_arguments_that_do_not_parse_as_an_empty_object():
    assert ToolCall("c1", "file_write", CUT).to_wire()["function"]["arguments"] == "{}"
    assert ToolCall("c1", "list_dir", "[1]").to_wire()["function"]["arguments"] == "{}"
    kept = '{"path": "a"}'
    assert ToolCall("c1", "list_dir", kept).to_wire()["function"]["arguments"] == kept
