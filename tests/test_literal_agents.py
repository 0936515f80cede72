"""Agents that read literally, as small local models do (ouroboros/testing/agents.py): each
reaction of theirs, from a message list to a reply; then the parts task, 40 parts in an 8k
window, through restarts and two `kill -9`s each followed by `ouroboros resume`, to be done
whole with nothing redone. The agents react to words, not to one wording: the harness passes
when its notes say the right thing (re-read your notes; this call was cut short) in the right
place (the last message), and nothing it says reads as an order to save out of turn."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any, Callable

import pytest

from ouroboros.demo import FILLER as DEMO_FILLER
from ouroboros.protocols import Message
from ouroboros.store.log import list_runs
from ouroboros.testing import Fault, Reply
from ouroboros.testing.agents import (
    CHARS_PER_PART,
    DONE_WORDS,
    FILLER,
    HELD_PID,
    LITERAL_AGENTS,
    LITERAL_PROMPT,
    MUSINGS,
    NOTES,
    LastWordAgent,
    LiteralAgent,
    WindowAgent,
    WordyAgent,
    make_parts,
    order_in,
    ranges,
    redone_parts,
    run_figures,
)
from tests.crash_helpers import kill, start_forked, wait_for
from tests.helpers import make_project, of_type, ouroboros_here, run_events

PROMPT = LITERAL_PROMPT.format(notes=NOTES)
RECORD = (
    "grep -qxF 'part_{0:03d}: {1}' results.txt 2>/dev/null || "
    "echo 'part_{0:03d}: {1}' >> results.txt"
)
WIND_DOWN = "[Context nearly full: 91% of the context budget is used. Save your progress now.]"


class Chat:
    """A conversation as the harness would send it, built step by step."""

    def __init__(self, system: str = PROMPT) -> None:
        self.messages: list[Message] = [{"role": "system", "content": system}]
        self.calls = 0

    def say(self, text: str) -> Chat:
        self.messages.append({"role": "user", "content": text})
        return self

    def did(self, name: str, args: dict[str, Any], result: str) -> Chat:
        self.calls += 1
        call_id = f"call_{self.calls}"
        self.messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)},
                    }
                ],
            }
        )
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
        return self

    def read_notes(self, text: str) -> Chat:
        return self.did("file_read", {"path": NOTES}, text)

    def wrote_notes(self, text: str) -> Chat:
        return self.did(
            "file_write",
            {"path": NOTES, "content": text},
            f"wrote {len(text)} bytes (2 lines) to {NOTES}",
        )

    def read_part(self, part: int, key: str = "abc123") -> Chat:
        return self.did(
            "file_read",
            {"path": f"data/part_{part:03d}.txt"},
            f"KEY: {key}\nShips came in at dawn.\n",
        )

    def recorded(self, part: int, key: str = "abc123", result: str = "[exit code 0]") -> Chat:
        return self.did("shell_exec", {"command": RECORD.format(part, key)}, result)


def calls(reply: Reply) -> list[tuple[str, Any]]:
    return [(name, args) for name, args in reply.tool_calls]


def notes_written(reply: Reply) -> str | None:
    return next(
        (
            args["content"]
            for name, args in reply.tool_calls
            if name == "file_write" and args["path"] == NOTES
        ),
        None,
    )


def reads(reply: Reply) -> list[str]:
    return [args["path"] for name, args in reply.tool_calls if name == "file_read"]


def worked(chat: Chat) -> Chat:
    """Notes read (1-2 done), then parts 3 and 4 read and recorded."""
    chat.say("Continue working towards your goals. Use your tools.")
    chat.read_notes("DONE: 1-2\nNEXT: 3\n")
    return chat.read_part(3).recorded(3).read_part(4).recorded(4)


# --- what every agent does --------------------------------------------------------------


def test_the_data_and_the_demo_filler_hold_no_order():
    assert order_in(FILLER) is None
    assert order_in(DEMO_FILLER) is None  # "checked twice" is no order to this matcher
    assert [
        order_in(text)
        for text in (
            WIND_DOWN,
            "[Session restarted. Check your workspace files for saved progress.]",
            "Re-read your notes before you act.",
            "Continue working towards your goals.",
            'Your note when told to wind down: "Saving my progress."',
            "[interrupted: ... may or may not have taken effect. Check before repeating it.]",
        )
    ] == ["save", "read", "read", "continue", "save", None]


@pytest.mark.parametrize("agent", LITERAL_AGENTS.values())
def test_every_agent_saves_when_the_newest_message_says_so_from_what_it_knows(agent):
    chat = worked(Chat()).wrote_notes("DONE: 1-20\nNEXT: 21\n")  # its own write: no knowledge
    reply = agent(6)(chat.say(WIND_DOWN).messages)
    assert calls(reply) == [("file_write", {"path": NOTES, "content": "DONE: 1-4\nNEXT: 5\n"})]


@pytest.mark.parametrize("agent", LITERAL_AGENTS.values())
def test_every_agent_checks_a_record_cut_short_before_doing_it_again(agent):
    chat = (
        worked(Chat())
        .read_part(5)
        .recorded(
            5,
            result="[interrupted: the harness stopped while this shell_exec call was running, so "
            "it may or may not have taken effect. Check before repeating it.]",
        )
    )
    reply = agent(6)(chat.messages)
    assert calls(reply) == [("shell_exec", {"command": "grep -q '^part_005: ' results.txt"})]

    found = agent(6)(
        chat.did(
            "shell_exec", {"command": "grep -q '^part_005: ' results.txt"}, "[exit code 0]"
        ).messages
    )
    assert reads(found) == ["data/part_006.txt"]  # 5 is done: on to 6, never recorded again


@pytest.mark.parametrize("agent", LITERAL_AGENTS.values())
def test_every_agent_checks_the_command_a_resume_note_names(agent):
    chat = worked(Chat()).read_part(5)
    chat.say(
        "[Resumed. A call was interrupted by the crash: `grep -qxF 'part_005: abc123' "
        "results.txt || echo ...`; it may or may not have run.]"
    )
    assert calls(agent(6)(chat.messages)) == [
        ("shell_exec", {"command": "grep -q '^part_005: ' results.txt"})
    ]


@pytest.mark.parametrize("agent", LITERAL_AGENTS.values())
def test_every_agent_checks_a_call_cut_short_only_while_it_is_news(agent):
    cut = (
        "Cut short (may or may not have taken effect): shell_exec grep -qxF 'part_005: "
        "abc123' results.txt 2>/dev/null || echo 'part_005:..."
    )
    last = worked(Chat()).read_part(5).say(f"[Session restarted. {cut}]")
    assert calls(agent(6)(last.messages))[0] == (
        "shell_exec",
        {"command": "grep -q '^part_005: ' results.txt"},
    )
    before = worked(Chat()).say(f"[Handoff: {cut}]").read_notes("DONE: 1-4\nNEXT: 5\n")
    assert reads(agent(6)(before.messages)) == ["data/part_005.txt"]  # not told after its reply


@pytest.mark.parametrize("agent", LITERAL_AGENTS.values())
def test_a_masked_result_holds_nothing(agent):
    chat = (
        Chat()
        .say("Continue.")
        .did(
            "file_read",
            {"path": NOTES},
            '[file_read result masked: notes.md, 2 lines, 20 B, began "DONE: 1-9". '
            'recall(id="obs-1") shows it again]',
        )
    )
    chat.read_part(1).recorded(1).say(WIND_DOWN)
    assert notes_written(agent(12)(chat.messages)) == "DONE: 1\nNEXT: 2\n"


def test_notes_pinned_in_the_system_message_are_known():
    chat = Chat(PROMPT + "\n## Your memory: notes.md\n\nDONE: 1-7\nNEXT: 8\n").say("Continue.")
    assert reads(WindowAgent(12)(chat.messages)) == ["data/part_008.txt"]


# --- (a) obeys the newest order anywhere, once -------------------------------------------


def test_literal_obeys_the_newest_order_anywhere_even_in_a_tool_result():
    chat = worked(Chat())
    chat.did("file_read", {"path": "README.txt"}, "Look at your notes before going on.")
    assert reads(LiteralAgent(6)(chat.messages)) == [NOTES]
    chat.did("file_read", {"path": "TODO.txt"}, "Wrap up and write down where you are.")
    assert notes_written(LiteralAgent(6)(chat.messages)) == "DONE: 1-4\nNEXT: 5\n"


def test_literal_obeys_an_order_once_then_works_on():
    chat = worked(Chat()).say("Please re-read your notes.")
    assert reads(LiteralAgent(6)(chat.messages)) == [NOTES]
    chat.read_notes("DONE: 1-4\nNEXT: 5\n")
    assert reads(LiteralAgent(6)(chat.messages)) == ["data/part_005.txt"]
    chat.say(WIND_DOWN).wrote_notes("DONE: 1-4\nNEXT: 5\n")
    assert reads(LiteralAgent(6)(chat.messages)) == ["data/part_005.txt"]  # saved once


def test_literal_saves_before_reading_when_a_note_quotes_the_wind_down():
    chat = Chat().say("[Session restarted. Check your workspace files for saved progress.]")
    chat.say('[Handoff: 20 turns. Your note when told to wind down: "Saving my progress."]')
    chat.read_part(11).recorded(11)
    reply = LiteralAgent(40)(chat.messages)
    assert notes_written(reply) == "DONE: 11\nNEXT: 1\n"  # 1-10 gone from the notes


def test_literal_reads_its_notes_when_the_last_note_says_so():
    chat = Chat().read_part(11).recorded(11)
    chat.say("[Session restarted: a new session. Re-read your notes before you act.]")
    assert reads(LiteralAgent(40)(chat.messages)) == [NOTES]


# --- (b) knows only its window ------------------------------------------------------------


def test_window_agent_rewrites_its_notes_from_its_window_only():
    chat = Chat().say("Continue.").read_notes("DONE: 1-5\nNEXT: 6\n")
    chat.read_part(6).recorded(6).wrote_notes("DONE: 1-30\nNEXT: 31\n").read_part(7)
    assert calls(WindowAgent(40)(chat.messages))[0][0] == "shell_exec"  # records 7 at once
    chat.recorded(7)
    assert notes_written(WindowAgent(40)(chat.messages)) == "DONE: 1-7\nNEXT: 8\n"

    unseen = Chat().say("Continue.").did("file_read", {"path": NOTES}, "error: no such file")
    unseen.read_part(6).recorded(6).read_part(7).recorded(7)
    assert notes_written(WindowAgent(40)(unseen.messages)) == "DONE: 6-7\nNEXT: 1\n"


def test_window_agent_reads_its_notes_at_a_start_because_the_system_prompt_says_so():
    start = Chat().say("Continue working towards your goals. Use your tools.")
    assert reads(WindowAgent(40)(start.messages)) == [NOTES]
    plain = Chat("Record the KEY line of every data file.").say("Continue working.")
    assert reads(WindowAgent(40)(plain.messages)) == ["data/part_001.txt"]


# --- (c) takes advice only from the last message ---------------------------------------------


def test_last_word_ignores_advice_not_in_the_last_message():
    chat = Chat().say("[Session restarted. Check your workspace files for saved progress.]")
    chat.read_part(11).recorded(11)
    assert reads(LastWordAgent(40)(chat.messages)) == ["data/part_001.txt"]
    chat.say("[Session restarted. Re-read your notes before you act.]")
    assert reads(LastWordAgent(40)(chat.messages)) == [NOTES]


def test_last_word_checks_a_call_cut_short_and_reads_its_notes_at_once_when_told_both():
    chat = Chat().read_part(11).recorded(11)
    chat.say(
        "[Session restarted. Cut short: `grep -qxF 'part_012: abc123' results.txt`. "
        "Re-read your notes before you act.]"
    )
    assert calls(LastWordAgent(40)(chat.messages)) == [
        ("shell_exec", {"command": "grep -q '^part_012: ' results.txt"}),
        ("file_read", {"path": NOTES}),
    ]


# --- (d) says it is done in words ---------------------------------------------------------


def test_wordy_says_done_in_words_and_literal_calls_task_complete():
    chat = Chat().say("Continue.").read_notes("DONE: 1-3\nNEXT: 4\n")
    said = WordyAgent(3)(chat.messages)
    assert (said.text, said.tool_calls) == (DONE_WORDS, [])
    assert [name for name, _ in LiteralAgent(3)(chat.messages).tool_calls] == ["task_complete"]


# --- the figures ------------------------------------------------------------------------------


def test_ranges_and_what_counts_as_redone():
    assert ranges({1, 2, 3, 5, 7, 8}) == "1-3,5,7-8"

    def event(name: str, **args: str) -> dict[str, Any]:
        return {"type": "tool_call", "name": name, "arguments": json.dumps(args)}

    events = [
        event("file_read", path="data/part_001.txt"),
        event("shell_exec", command=RECORD.format(1, "ab")),
        event("file_read", path="data/part_002.txt"),
        event("shell_exec", command=RECORD.format(2, "cd")),
        event("shell_exec", command="grep -q '^part_002: ' results.txt"),  # a check
        event("file_read", path="data/part_001.txt"),  # read again after its record
        event("file_read", path="data/part_003.txt"),
        event("file_read", path="data/part_003.txt"),  # not recorded yet: not redone
        event("shell_exec", command=RECORD.format(3, "ef")),
        event("shell_exec", command=RECORD.format(3, "ef")),
    ]  # recorded twice
    assert redone_parts(events) == [1, 3]


# --- the task, end to end -------------------------------------------------------------------

PARTS = 40
WINDOW = 8192
HELD_PART = 25  # its record appends its line, then sleeps until the second kill
WAIT_SECS = 25  # for each kill point: both within the test's 60 s


class HeldAtRestart:
    """The brain, except that the first request after the run's first restart is answered
    only after 120 s: the first kill comes while the harness waits for it."""

    def __init__(self, agent: Callable[[list[Message]], Reply], root: Path) -> None:
        self.agent = agent
        self.root = root
        self.held = threading.Event()

    def __call__(self, messages: list[Message]) -> Reply:
        if not self.held.is_set() and self.restarted():
            self.held.set()
            return Fault("slow", seconds=120)  # type: ignore[return-value]
        return self.agent(messages)

    def restarted(self) -> bool:
        runs = self.root / ".ouroboros" / "runs"
        return any(
            b'"session_restart"' in path.read_bytes()
            for path in runs.glob("*/**/*.jsonl")
            if path.is_file()
        )


def held_pid(root: Path) -> Path:
    return root / "workspace" / HELD_PID


def crash(root: Path, config: Path, command: str, until: Callable[[], Any]) -> bool:
    """`ouroboros COMMAND` in a process of its own, killed -9 once `until()` holds; False if
    it ended first (an agent redoing its work may reach its turn limit before)."""
    process = start_forked(command, "--config", str(config), "--headless", root=root)
    try:
        reached = wait_for(
            lambda: until() or process.poll() is not None, f"{command} to go on", timeout=WAIT_SECS
        )
        killed = until() and process.poll() is None
        kill(process)
        return bool(reached and killed)
    finally:
        kill(process)
        if held_pid(root).exists():  # the held record's shell outlives the harness
            try:
                os.killpg(int(held_pid(root).read_text()), signal.SIGKILL)
            except (OSError, ValueError):
                pass


def parts_project(root: Path, base_url: str) -> tuple[Path, dict[int, str]]:
    config = make_project(
        root,
        base_url,
        prompt=PROMPT,
        model={"context_limit": WINDOW, "max_retry_secs": 5},
        agent={"max_turns": 5 * PARTS, "max_idle_turns": 1},  # a cap, should a run redo
        safety={"sandbox": "off"},
    )  # about resuming, not confinement: kept cheap
    return config, make_parts(root / "workspace", PARTS, CHARS_PER_PART)


@pytest.mark.parametrize("name", LITERAL_AGENTS)
def test_forty_parts_through_restarts_and_two_kills(tmp_path, scripted_server, name):
    agent = LITERAL_AGENTS[name](PARTS, hold_part=HELD_PART, musing=MUSINGS)
    brain = HeldAtRestart(agent, tmp_path)
    server = scripted_server(brain, model="scripted", context_length=WINDOW)
    config, keys = parts_project(tmp_path, server.base_url)

    killed = [
        crash(tmp_path, config, "run", brain.held.is_set),  # waiting for the model
        crash(tmp_path, config, "resume", held_pid(tmp_path).exists),
    ]  # in a record
    result = ouroboros_here("resume", "--config", str(config), "--headless")

    figures = run_figures(tmp_path, keys)
    events = run_events(tmp_path)
    ended = of_type(events, "run_end")[-1]
    assert (figures.done, figures.redone, figures.complete) == (PARTS, 0, True), (
        f"{name}: {figures.line()}; redone {list(figures.redone_parts)}"
    )
    assert killed == [True, True] and len(of_type(events, "run_resumed")) == 2, killed
    assert figures.restarts >= 2
    assert len(list_runs(tmp_path / ".ouroboros")) == 1
    if isinstance(agent, WordyAgent):  # says done in words: the run pauses, reading as done
        assert result.returncode == 3 and ended["reason"] == "idle", result.stdout
    else:
        assert result.returncode == 0 and ended["reason"] == "task_complete", result.stdout


# --- the harness's own words, read literally ------------------------------------------------


def harness_notes() -> dict[str, str]:
    """Every note the harness writes into a prompt, as it writes it (the real functions,
    with facts that name files, commands, failures and calls cut short)."""
    from ouroboros.loop.guards import Loop, loop_note, redo_detail, redo_note
    from ouroboros.loop.handoff import Digest, restart_note
    from ouroboros.loop.restart import carried_from
    from ouroboros.protocols import ToolCall
    from ouroboros.tools import cut_off_result
    from ouroboros.window.conversation import Record, interrupted_note, mask_notice

    digest = Digest(turns=21, calls=30)
    for _ in range(3):
        digest.wrote(NOTES)
    digest.commands.append((RECORD.format(7, "abc123"), 0))
    digest.count_failure("file_read gone.txt", "error: file not found")
    digest.count_failure("file_read gone.txt", "error: file not found")
    digest.interrupted.append((f"shell_exec {RECORD.format(8, 'def456')}", 3))
    return {
        "restart": restart_note(
            digest, session=4, previous_turns=21, carried=True, facts_chars=4000, memory="NOTES.md"
        ),
        "carried": carried_from(3, [Record({"role": "assistant", "content": ""})])[0].message[
            "content"
        ],
        "interrupted": interrupted_note([("shell_exec", RECORD.format(8, "def456"))]),
        "redoing": redo_note(redo_detail(3, 5, [(f"shell_exec {RECORD.format(2, 'a')}", 1)])),
        "mask": mask_notice(3, 40.0).message["content"],
        "stuck": loop_note(Loop("repeat", 4, "file_read gone.txt failed 4 times")),
        "cut off": cut_off_result(
            ToolCall("c1", "file_write", '{"path": "notes.md", "content": "DONE: 1-')
        ).content,
    }


def test_no_note_of_the_harness_reads_as_save_but_the_wind_down():
    """A literal model saves when it reads 'save', 'wind down', 'wrap up': only the wind-down
    may say so; a save made at any other moment is made from what it can see, and destroys
    its notes."""
    from ouroboros.testing.agents import order_in
    from ouroboros.window.conversation import WIND_DOWN_TEXT

    orders = {name: order_in(text) for name, text in harness_notes().items()}
    assert orders["restart"] == "read"  # what to do first, and nothing else
    assert orders["carried"] is None and orders["mask"] is None
    assert all(order != "save" for order in orders.values()), orders
    assert order_in(WIND_DOWN_TEXT.format(pct=0.91)) == "save"


@pytest.mark.parametrize("agent", LITERAL_AGENTS.values())
def test_every_agent_reads_its_notes_first_after_the_real_restart_note(agent):
    notes = harness_notes()
    chat = Chat().say(notes["carried"]).read_part(11).recorded(11).say(notes["restart"])
    reply = agent(40)(chat.messages)
    assert NOTES in reads(reply) or any(
        "part_008" in json.dumps(args) for _, args in calls(reply)
    )  # or checks the cut one
    assert notes_written(reply) is None  # never a save before it has read them


# --- the save before a restart (issue 36, items 1-2) -----------------------------------------


def test_the_save_before_a_restart_never_goes_backwards(tmp_path, scripted_server):
    """A server reloaded with half the window mid-session: at the wind-down the pre-flight
    must make room, and never by dropping what the agent did since it last read its notes
    (here: all it did, it never read them); work after the save is saved again before the
    restart. Every part is done once (it redid 1-6 when the records went first)."""
    name, window, grows = "a-newest-order", WINDOW, (18, 4096)
    agent = LITERAL_AGENTS[name](PARTS, musing=MUSINGS)
    server = scripted_server(agent, model="scripted", context_length=window, grows=grows)
    config = make_project(
        tmp_path,
        server.base_url,
        prompt=PROMPT,
        model={"context_limit": window},
        agent={"max_turns": 10 * PARTS},
        safety={"sandbox": "off"},
    )
    keys = make_parts(tmp_path / "workspace", PARTS, CHARS_PER_PART)

    result = ouroboros_here("run", "--config", str(config), "--headless")

    figures = run_figures(tmp_path, keys)
    assert (figures.done, figures.complete) == (PARTS, True), figures.line()
    # at most the two prompts issue 36 allows over the reloaded window (the one sent before
    # anyone could know, and the one that finds out); a prompt the server cut shows the agent
    # a window without its records, and a part read again there is the only kind redone
    assert server.over_limit <= 2 and figures.redone <= server.over_limit, (
        f"{name}: {figures.line()}; redone {list(figures.redone_parts)}"
    )
    assert result.returncode == 0, result.stdout
