"""Stream chunks of the wrong shape end the attempt with a reason naming the field, never a
traceback, and model text with lone surrogates is stored with U+FFFD in their place (issue
10, item 6): every shape through the client over a loopback socket, and the real `ouroboros
run` through two of them and a reply full of surrogates."""

from __future__ import annotations

import asyncio
import json

import pytest

from ouroboros.errors import TransientModelError
from ouroboros.server.client import ChatClient
from ouroboros.store.state_file import STATE_FILE
from ouroboros.testing import Reply
from tests.faults.servers import Good, Malformed, run_against, start_server
from tests.helpers import of_type, run_events

SHAPES = [
    ("[1, 2]", "the chunk is an array, not an object"),
    ('"keep-alive"', "the chunk is a string, not an object"),
    ("null", "the chunk is null, not an object"),
    ('{"choices": {"0": {"delta": {}}}}', "choices is an object, not an array"),
    ('{"choices": ["x"]}', "choices[0] is a string, not an object"),
    ('{"choices": [{"delta": "hi"}]}', "choices[0].delta is a string, not an object"),
    (
        '{"choices": [{"delta": {"tool_calls": {"index": 0}}}]}',
        "choices[0].delta.tool_calls is an object, not an array",
    ),
    (
        '{"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"name": "a", '
        '"arguments": 5}}]}}]}',
        "choices[0].delta.tool_calls[0].function.arguments is a number",
    ),
    ('{"choices": [{"delta": {"content": 5}}]}', "choices[0].delta.content is a number"),
    (
        '{"choices": [{"delta": {"tool_calls": [{"function": "file_read"}]}}]}',
        "choices[0].delta.tool_calls[0].function is a string, not an object",
    ),
]


SHAPE_IDS = [
    "array",
    "string",
    "null",
    "choices-object",
    "choice-string",
    "delta-string",
    "tool_calls-object",
    "arguments-number",
    "content-number",
    "function-string",
]


@pytest.mark.parametrize("payload, reason", SHAPES, ids=SHAPE_IDS)
def test_a_malformed_chunk_ends_the_attempt_naming_the_field(payload, reason):
    async def go():
        async with ChatClient(server.base_url, "scripted") as client:
            outcomes = []
            for _ in range(2):
                try:
                    outcomes.append(await client.complete([{"role": "user", "content": "go"}], []))
                except TransientModelError as error:
                    outcomes.append(error)
            return outcomes

    with start_server([Malformed(payload=payload)]) as server:
        failed, recovered = asyncio.run(go())

    assert isinstance(failed, TransientModelError)
    assert f"sent a malformed chunk ({reason}" in failed.message
    assert recovered.text == "Looking around."  # the next attempt reads a good reply


def test_a_run_survives_malformed_chunks_and_stores_text_with_lone_surrogates(tmp_path):
    surrogates = Reply(
        "bad \ud800 text \udfff.", [("file_write", {"path": "s.txt", "content": "x\udc00y"})]
    )
    acts = [
        Malformed(payload='{"choices": {"0": {}}}'),
        Good(),
        Malformed(payload='{"choices": [{"delta": "hi"}]}'),
        Good(reply=surrogates),
    ]
    with start_server(acts) as server:
        result = run_against(tmp_path, server, {}, max_turns=2)

    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    events = run_events(tmp_path)  # every line of the log is JSON
    errors = [r["error"] for r in of_type(events, "retry")]
    assert len(errors) == 2
    assert "choices is an object, not an array" in errors[0]
    assert "choices[0].delta is a string, not an object" in errors[1]
    assert of_type(events, "assistant")[-1]["text"] == "bad \ufffd text \ufffd."
    assert (tmp_path / "workspace" / "s.txt").read_text() == "x\ufffdy"
    run_dir = next((tmp_path / ".ouroboros" / "runs").iterdir())
    state = json.loads((run_dir / STATE_FILE).read_text(encoding="utf-8"))
    assert "bad \ufffd text" in json.dumps(state, ensure_ascii=False)
