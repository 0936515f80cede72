"""Masking reaches the calls: a model's own long arguments (the content of a file it wrote
again since, a command with pages of comment) fill a small window as surely as tool output
does. Masked, a call keeps the head of a long argument, and a write a later write of the
same file replaced keeps a stand-in for its content; the newest write of each file keeps
its content. A literal model copies the shape of its earlier calls, stand-ins and all: the
tools refuse them, and nothing is written or run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from ouroboros.protocols import (
    Message,
    ToolResult,
    argument_cut,
    holds_stand_in,
    replaced_content,
)
from ouroboros.testing import Reply
from ouroboros.testing.agents import (
    CHARS_PER_PART,
    LITERAL_PROMPT,
    MUSINGS,
    NOTES,
    WindowAgent,
    make_parts,
    order_in,
    run_figures,
)
from ouroboros.tools import FileWrite, ShellExec
from ouroboros.window import conversation as conv
from tests.conversations import asked, manager, tool_call
from tests.helpers import make_project, of_type, ouroboros_here, run_events

NOTE_TEXT = "DONE: 1-4\nNEXT: 5\nThoughts: " + "the ledger lists each cargo by weight. " * 60
COMMAND = "echo 'part_004: abc' >> results.txt  # " + "the key line sits at the top. " * 80


def arguments_of(message: Message, call_id: str) -> dict[str, Any]:
    found = next(c for c in message["tool_calls"] if c["id"] == call_id)
    return json.loads(found["function"]["arguments"])


# --- what a masked call keeps ----------------------------------------------------------------


def test_a_replaced_write_keeps_a_stand_in_for_its_content_and_its_path():
    arguments = json.dumps({"path": "notes.md", "content": NOTE_TEXT})

    cut = json.loads(conv.cut_arguments("file_write", arguments, "notes.md"))

    assert len(NOTE_TEXT) == 2_368
    assert cut == {
        "path": "notes.md",
        "content": "[2,368 characters, replaced since by a later write of notes.md]",
    }


def test_a_long_argument_keeps_its_head_and_says_how_much_went():
    cut = json.loads(conv.cut_arguments("shell_exec", json.dumps({"command": COMMAND}), ""))

    assert len(COMMAND) == 2_439
    assert cut["command"] == COMMAND[:200] + "[... 2,239 more characters, not kept in the history]"
    assert cut["command"].startswith("echo 'part_004: abc' >> results.txt")  # what it did


@pytest.mark.parametrize(
    "arguments",
    [
        json.dumps({"command": "ls -la"}),  # short: nothing to cut
        json.dumps({"path": "a.txt", "offset": 3}),
        '{"command": "echo unfinished',  # no JSON: left as the model sent it
        json.dumps(["not", "an", "object"]),
    ],
)
def test_arguments_with_nothing_long_stay_as_they_are(arguments):
    assert conv.cut_arguments("shell_exec", arguments, "") == arguments


def test_an_observation_counts_what_masking_would_cut_from_its_call():
    wrote = ToolResult("wrote 2400 bytes (3 lines) to notes.md", meta={"path": "notes.md"})
    long_write = conv.describe(
        tool_call("w1", "file_write", path="notes.md", content=NOTE_TEXT), "", wrote, "obs-1"
    )
    short_write = conv.describe(
        tool_call("w2", "file_write", path="notes.md", content="DONE: 1\n"), "", wrote, "obs-2"
    )
    command = conv.describe(
        tool_call("s1", "shell_exec", command=COMMAND), "", ToolResult(""), "obs-3"
    )

    assert long_write.call_cut > 0.9 * len(NOTE_TEXT)
    assert short_write.call_cut == 0  # its stand-in would be longer than what it holds
    assert command.call_cut > 0.8 * len(COMMAND)


def test_the_placeholder_of_a_long_command_shows_its_head_not_all_of_it():
    result = ToolResult("line\n" * 400, meta={"command": COMMAND, "exit_code": 0})
    obs = conv.describe(tool_call("s1", "shell_exec", command=COMMAND), COMMAND, result, "obs-1")

    shown = conv.placeholder(obs)

    assert COMMAND[: conv.TARGET_SHOWN] + "..." in shown and len(shown) < conv.TARGET_SHOWN + 150


# --- which writes may lose their content -------------------------------------------------------


def observed(call_id: str, path: str, first_line: str) -> conv.Observation:
    return conv.Observation(call_id, call_id, "file_write", path, 40, 1, first_line, call_cut=900)


def test_only_a_write_replaced_by_a_later_one_that_succeeded_loses_its_content():
    observations = {
        o.tool_call_id: o
        for o in [
            observed("w1", "notes.md", "wrote 900 bytes"),  # replaced by w3
            observed("w2", "plan.md", "wrote 900 bytes"),  # the only write of plan.md
            observed("w3", "notes.md", "wrote 900 bytes"),
            observed("w4", "notes.md", "error: disk full"),  # failed: w3 still holds the file
            observed("w5", "todo.md", "error: no room"),  # failed, then written: replaced
            observed("w6", "todo.md", "wrote 900 bytes"),
        ]
    }

    assert conv.standing_writes(observations) == {"w2", "w3", "w4", "w6"}


# --- masking, carried out ------------------------------------------------------------------------


def notes_session(cm, writes: int) -> conv.Conversation:
    """A session that wrote its notes `writes` times, each with pages of thoughts, and read a
    part between them: each write replaced the one before."""
    messages = conv.Conversation(
        [{"role": "system", "content": "mission"}, {"role": "user", "content": "go"}],
        cm.worth_masking,
    )
    for n in range(writes):
        write = tool_call(f"w{n}", "file_write", path="notes.md", content=f"{n}\n{NOTE_TEXT}")
        read = tool_call(f"r{n}", "file_read", path=f"data/part_{n}.txt")
        messages.append(asked(write, read))
        wrote = ToolResult(f"wrote {len(NOTE_TEXT)} bytes to notes.md", meta={"path": "notes.md"})
        cm.add_result(messages, write, "notes.md", wrote)
        cm.add_result(messages, read, "", ToolResult(f"KEY: {n}\nshort"))
    return messages


def test_masking_a_replaced_write_takes_its_content_out_of_its_call_and_leaves_its_result():
    cm = manager(limit=20_000)
    messages = notes_session(cm, 3)
    before = cm.current_tokens(messages, [])
    result = next(m for m in messages if m.get("tool_call_id") == "w0")

    cm.mask(messages, ["w0"])

    turn = messages[2]
    assert arguments_of(turn, "w0") == {
        "path": "notes.md",
        "content": "[2,370 characters, replaced since by a later write of notes.md]",
    }
    assert arguments_of(turn, "r0") == {"path": "data/part_0.txt"}  # its other call as it was
    assert next(m for m in messages if m.get("tool_call_id") == "w0") == result
    assert cm.current_tokens(messages, []) < before - 400
    assert "w0" not in messages.tally.candidates()  # masked once, never again
    assert cm.observations["w0"].masked


def test_the_newest_write_of_a_file_keeps_its_content_however_full_the_window():
    cm = manager(limit=20_000)
    messages = notes_session(cm, 4)

    fitted = cm.fit(messages, [], target=500)  # far less than the turns kept need

    assert {"w0", "w1", "w2"} <= set(fitted.masked) and "w3" not in fitted.masked
    newest = next(m for m in fitted.messages if m["role"] == "assistant" and "w3" in json.dumps(m))
    assert arguments_of(newest, "w3")["content"] == f"3\n{NOTE_TEXT}"


def test_a_round_counts_what_the_server_processes_again_from_the_call_it_changes():
    cm = manager(limit=20_000)
    messages = notes_session(cm, 3)
    tally = messages.tally
    cpt = cm.chars_per_token

    from_result = tally.suffix("w0", cpt)
    from_call = tally.suffix("w0", cpt, call=True)

    assert from_call - from_result == cm.current_tokens(messages, [], upto=3) - cm.current_tokens(
        messages, [], upto=2
    )


# --- the tools refuse a stand-in ------------------------------------------------------------


def test_file_write_refuses_content_that_holds_a_stand_in_and_leaves_the_file(workspace: Path):
    (workspace / NOTES).write_text("DONE: 1-12\nNEXT: 13\n")
    write = FileWrite(workspace, on_security=print)

    copied = replaced_content(2400, NOTES)
    result = asyncio.run(write.run({"path": NOTES, "content": copied}))

    assert not result.ok and result.content.startswith("error: the content holds")
    assert order_in(result.content) is None  # a literal model reads no order in why
    assert (workspace / NOTES).read_text() == "DONE: 1-12\nNEXT: 13\n"


def test_shell_exec_refuses_a_command_that_holds_a_cut_and_runs_nothing(workspace: Path):
    shell = ShellExec(
        workspace,
        timeout_secs=5,
        max_output_bytes=1000,
        blocked_patterns=[],
        secret_env_names=[],
        on_security=print,
    )
    copied = "echo ran > ran.txt  # " + argument_cut(2843)

    result = asyncio.run(shell.run({"command": copied}))

    assert not result.ok and "not run" in result.content
    assert order_in(result.content) is None
    assert not (workspace / "ran.txt").exists()


def test_the_stand_ins_hold_no_order_a_literal_model_obeys():
    for text in (replaced_content(2400, NOTES), argument_cut(2843)):
        assert holds_stand_in(text) and order_in(text) is None


# --- a literal model, copying its own calls -------------------------------------------------


class CopyingAgent(WindowAgent):
    """A chatty model (500 words in each command and notes write) that, every seventh reply,
    sends again, verbatim, the oldest calls in sight whose arguments masking cut: the shape of
    its own earlier calls, stand-ins and all."""

    def __init__(self, parts: int) -> None:
        super().__init__(parts, musing=MUSINGS, chatter=500)
        self.replies = 0
        self.copied = 0

    def __call__(self, messages: list[Message]) -> Reply:
        self.replies += 1
        cut = [
            c["function"]
            for m in messages
            if m["role"] == "assistant"
            for c in m.get("tool_calls") or ()
            if holds_stand_in(c["function"]["arguments"])
        ]
        if self.replies % 7 == 0 and cut:
            self.copied += len(cut[:2])
            copies = [(f["name"], json.loads(f["arguments"])) for f in cut[:2]]
            return Reply("Doing that step again.", copies)
        return super().__call__(messages)


def test_a_model_copying_its_cut_calls_writes_and_runs_nothing_of_them(tmp_path, scripted_server):
    parts = 40
    agent = CopyingAgent(parts)
    server = scripted_server(agent, model="scripted", context_length=8192)
    config = make_project(
        tmp_path,
        server.base_url,
        prompt=LITERAL_PROMPT.format(notes=NOTES),
        model={"context_limit": 8192},
        agent={"max_turns": 6 * parts},
        safety={"sandbox": "off"},
    )
    keys = make_parts(tmp_path / "workspace", parts, CHARS_PER_PART)

    result = ouroboros_here("run", "--config", str(config), "--headless")

    figures = run_figures(tmp_path, keys)
    workspace = tmp_path / "workspace"
    assert result.returncode == 0, result.stdout
    assert (figures.done, figures.complete) == (parts, True), figures.line()
    assert agent.copied >= 4
    failed = [e["summary"] for e in of_type(run_events(tmp_path), "tool_result") if not e["ok"]]
    refused = [summary for summary in failed if "what the history keeps" in summary]
    assert len(refused) == agent.copied  # each copy, told why
    results = (workspace / "results.txt").read_text().splitlines()
    assert len(results) == parts and not holds_stand_in("\n".join(results))
    assert not holds_stand_in((workspace / NOTES).read_text())
    # its own long arguments no longer fill the window: with them kept, a session held two
    # parts (19 restarts)
    assert figures.restarts <= 14, figures.line()
