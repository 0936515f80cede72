"""An agent left running, end to end against the scripted server: a loop is stopped, the
memory it writes in one session is pinned in every request of the next, a restart begins
with the harness's handoff, and `ouroboros tell` reaches a running agent."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from ouroboros.config import load_config
from ouroboros.demo import RecordingAgent, write_demo_project
from ouroboros.loop.runner import run_agent
from ouroboros.protocols import Message, RunHooks
from ouroboros.store.state_file import STATE_FILE
from ouroboros.testing import Reply, ScriptedServer
from tests.helpers import (
    make_project,
    of_type,
    ouroboros_forked,
    ouroboros_here,
    run_dir,
    run_events,
)

MEMORY = "- part 3's key is upper-case in results.txt (decided in session 1)"


def test_a_loop_is_stopped_within_twelve_calls(tmp_path, scripted_server):
    def stubborn(messages: list[Message]) -> Reply:
        return Reply("Reading it again.", [("file_read", {"path": "data/part_000.txt"})])

    server = scripted_server(stubborn)
    config = make_project(tmp_path, server.base_url)

    result = ouroboros_here("run", "--config", str(config), "--headless", "--max-turns", "40")

    assert result.returncode == 3, result.stderr  # paused: stuck
    events = run_events(tmp_path)
    assert len(of_type(events, "tool_call")) <= 12
    assert [e["action"] for e in of_type(events, "stuck")] == ["note", "pause"]
    assert events[-1]["type"] == "run_end" and events[-1]["reason"] == "stuck"
    told = [
        m["content"]
        for r in server.requests
        for m in r["messages"]
        if "Loop detected" in (m.get("content") or "")
    ]
    assert told and "data/part_000.txt" in told[0]
    assert "STUCK (repeat)" in result.stdout and "ouroboros resume" in result.stdout


class NoteTaker(RecordingAgent):
    """The demo agent that first writes its memory file."""

    def __call__(self, messages: list[Message]) -> Reply:
        pinned = MEMORY in (messages[0].get("content") or "")  # from session 2 on
        if not pinned and not any("NOTES.md" in (m.get("content") or "") for m in messages[1:]):
            return Reply(
                "Noting what I decided.", [("file_write", {"path": "NOTES.md", "content": MEMORY})]
            )
        return super().__call__(messages)


def demo_task(root, agent: RecordingAgent) -> ScriptedServer:
    """The demo task done to its end by `agent` in a 4k window; the server, for its
    requests."""
    with ScriptedServer(agent, model="scripted-demo", context_length=4096) as server:
        write_demo_project(root, server.base_url, agent.parts)
        loaded = load_config(root / "ouroboros.toml", {}, env={}, user_file=None)
        assert asyncio.run(run_agent(loaded, RunHooks())) == 0
    return server


def test_memory_and_handoff_carry_a_session_into_the_next(tmp_path):
    server = demo_task(tmp_path, NoteTaker(14))
    events = run_events(tmp_path)
    assert events[-1]["reason"] == "task_complete"
    restart = of_type(events, "session_restart")[0]
    starts = [
        i
        for i, r in enumerate(server.requests)
        if "[Session 2 of this run begins" in r["messages"][-1]["content"]
    ]
    session_2 = [
        r["messages"]
        for r in server.requests[starts[0] :]
        if not any("[Session 3 of" in (m.get("content") or "") for m in r["messages"])
    ]
    session_1 = server.requests[: starts[0]]
    # The memory written in session 1 is pinned in every request of session 2.
    assert session_2 and all(MEMORY in messages[0]["content"] for messages in session_2)
    assert MEMORY not in session_1[0]["messages"][0]["content"]  # not written yet
    # Its first request ends with the facts of the run and what to do first, after the
    # carried turns.
    first = session_2[0]
    handoff = first[-1]["content"]
    assert handoff.startswith("[Session 2 of this run begins")
    assert "- files written: NOTES.md" in handoff and "progress.md" in handoff
    assert f"after {restart['previous_turns']} turns" in handoff
    assert "re-read your notes (NOTES.md, pinned in the system message" in handoff
    assert first[2]["role"] == "assistant"
    [logged] = [e for e in of_type(events, "handoff") if e["session"] == 2]
    assert logged["text"] == handoff


def test_the_system_prompt_s_marks_stay_beside_it_never_on_the_wire(tmp_path):
    """What the system prompt is made of (the mission's fingerprint, the memory pinned) is
    kept beside it and saved in state.json: no request holds a key of the harness's."""
    server = demo_task(tmp_path, NoteTaker(14))
    assert any(MEMORY in r["messages"][0]["content"] for r in server.requests)  # pinned
    sent = [key for r in server.requests for m in r["messages"] for key in m]
    assert sent and not [key for key in sent if key.startswith("_")]
    state = json.loads((run_dir(tmp_path) / STATE_FILE).read_text())["state"]
    assert state["system_marks"]["memory"] == "NOTES.md"
    assert not [key for m in state["messages"] for key in m if key.startswith("_")]


@pytest.mark.parametrize("typo", ["", "[context]\nsof_threshold_pct = 0.6\n"])
def test_tell_reaches_a_running_agent_within_two_turns(tmp_path, scripted_server, typo):
    """Also once the config has a typo in it (made while the run goes on): the inbox needs
    only the state dir."""
    first_asked, told = threading.Event(), threading.Event()
    turns: list[int] = []

    def agent(messages: list[Message]) -> Reply:
        turns.append(len(turns) + 1)
        if len(turns) == 1:
            first_asked.set()
            told.wait(30)
        if any(m.get("content") == "Stop after this: write done.txt" for m in messages):
            return Reply("", [("task_complete", {"summary": "told to stop"})])
        return Reply(
            "Working.", [("file_write", {"path": f"step{len(turns)}.txt", "content": "x"})]
        )

    server = scripted_server(agent)
    config = make_project(tmp_path, server.base_url)
    run = ouroboros_forked(
        "run",
        "-c",
        str(config),
        "--headless",
        cwd=tmp_path,
        out=tmp_path / "out.txt",
        err=tmp_path / "err.txt",
    )
    try:
        assert first_asked.wait(30)
        (tmp_path / "workspace" / "deep").mkdir()
        with config.open("a") as file:
            file.write(typo)
        sent = ouroboros_here(
            "tell", "Stop after this: write done.txt", cwd=tmp_path / "workspace" / "deep"
        )
        told.set()
        assert sent.returncode == 0, sent.stderr
        assert sent.stderr.count("\n") == (1 if typo else 0)
        assert "`ouroboros tell` delivers the message anyway" in sent.stderr or not typo
        assert sent.stdout.startswith("sent to run ")
        assert run.wait(30) == 0, (tmp_path / "err.txt").read_text()
    finally:
        told.set()
        if run.poll() is None:
            run.kill()
    asked = [r["messages"] for r in server.requests]
    given = next(
        i
        for i, messages in enumerate(asked)
        if any(m.get("content") == "Stop after this: write done.txt" for m in messages)
    )
    assert given <= 2  # the request after the turn it was sent in, or the one after
    events = run_events(tmp_path)
    assert [e["text"] for e in of_type(events, "user_message")] == [
        "Stop after this: write done.txt"
    ]
    assert events[-1]["reason"] == "task_complete"


def test_tell_with_no_run_waits_for_the_next_resume_and_an_empty_one_is_refused(
    tmp_path, scripted_server
):
    server = scripted_server([Reply("Hello.")] * 2)
    config = make_project(tmp_path, server.base_url)
    ran = ouroboros_here("run", "-c", str(config), "--headless", "--max-turns", "1")
    assert ran.returncode == 3, ran.stderr

    empty = ouroboros_here("tell", "   ", cwd=tmp_path)
    assert empty.returncode == 2 and empty.stderr.count("\n") == 1
    assert "the message is empty" in empty.stderr
    queued = ouroboros_here("tell", "Now do part 2.", cwd=tmp_path)
    assert queued.returncode == 0 and "waits for the next `ouroboros resume`" in queued.stdout
    (tmp_path / "workspace" / "NOTES.md").write_text("- part 1 went well\n")
    resumed = ouroboros_here("resume", "-c", str(config), "--headless", "--max-turns", "1")

    assert resumed.returncode == 3, resumed.stderr  # paused: its one more turn taken
    assert server.requests[-1]["messages"][-1] == {"role": "user", "content": "Now do part 2."}
    # a resume is a session start: the memory is read again
    assert "- part 1 went well" in server.requests[-1]["messages"][0]["content"]
    assert "- part 1 went well" not in server.requests[0]["messages"][0]["content"]
    assert not list((tmp_path / ".ouroboros" / "inbox").glob("*.json"))


class NotesVandal(RecordingAgent):
    """The demo agent that, as it records parts 6, 14 and 22, makes its memory file
    something that cannot be pinned whole: a huge file, a binary one, a link out of the
    workspace."""

    VANDAL = {
        6: ("shell_exec", {"command": "yes 'old line' | head -n 40000 > NOTES.md"}),
        14: ("shell_exec", {"command": "printf 'bin\\000ary' > NOTES.md"}),
        22: ("shell_exec", {"command": "rm -f NOTES.md && ln -s /etc/passwd NOTES.md"}),
    }

    def __call__(self, messages: list[Message]) -> Reply:
        reply = super().__call__(messages)
        part = (
            int(reply.text.split()[-1].rstrip("."))
            if reply.text.startswith("Recording part")
            else None
        )
        if part in self.VANDAL:
            return Reply(reply.text, [*reply.tool_calls, self.VANDAL[part]])
        return reply


def test_a_memory_file_huge_binary_or_replaced_changes_nothing_of_a_restart(tmp_path):
    server = demo_task(tmp_path, NotesVandal(32))
    events = run_events(tmp_path)
    assert events[-1]["reason"] == "task_complete" and len(of_type(events, "session_restart")) >= 3
    firsts = [
        r["messages"]
        for r in server.requests
        if "of this run begins" in r["messages"][-1]["content"]
    ]
    assert len(firsts) == len(of_type(events, "session_restart"))
    for messages in firsts:  # each restart ends with its note, whatever NOTES.md became
        assert messages[-1]["content"].splitlines()[-1].startswith("First, before you act")
        assert "root:" not in messages[0]["content"]  # never the link's target
        assert len(messages[0]["content"]) < 20_000  # the huge one cut to its budget
    warned = " ".join(e["message"] for e in of_type(events, "warning"))
    assert "NOTES.md is binary" in warned and "NOTES.md" in warned


def test_with_max_idle_turns_0_the_idle_line_says_the_run_never_pauses(tmp_path, scripted_server):
    replies = [Reply("")] * 4 + [Reply("", [("task_complete", {"summary": "done"})])]
    server = scripted_server(replies)
    config = make_project(
        tmp_path, server.base_url, agent={"max_idle_turns": 0, "idle_pause_max_secs": 0.01}
    )

    result = ouroboros_here("run", "-c", str(config), "--headless")

    assert result.returncode == 0, result.stderr
    idle = [line for line in result.stdout.splitlines() if "no tool call in" in line]
    assert idle and all(
        line.endswith("(agent.max_idle_turns = 0: the run never pauses)") for line in idle
    ), idle
    assert "pauses after 0" not in result.stdout
