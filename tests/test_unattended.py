"""An unattended session, driven directly (tests/session_rig.py): the stuck-loop guard's note
and pause, idle replies with new text, messages from `ouroboros tell`, the memory file pinned
in the system message, and the handoff a restart begins with."""

from __future__ import annotations

import os

from ouroboros.config import load_config
from ouroboros.loop.endings import StopRun
from ouroboros.loop.handoff import Digest, restart_note
from ouroboros.loop.inbox import post, waiting
from ouroboros.loop.memory import SystemPrompt, read_pinned, system_message
from tests.fakes import FakeModel, call, reply
from tests.helpers import make_project
from tests.session_rig import CONTINUE, Rig, contents, reads

# --- the stuck-loop guard -------------------------------------------------------------------


def test_a_repeated_failing_call_gets_a_note_then_pauses_the_run(tmp_path):
    model = FakeModel(then=lambda sent: reply("", call("file_read", path="missing.txt")))
    rig = Rig(tmp_path, model)

    end = rig.run()

    assert isinstance(end, StopRun) and end.reason == "stuck"
    assert len(model.requests) == 8  # 4 to see the loop, 4 more once told
    held = rig.state.messages
    notes = [m for m, kind in zip(held, held.notes) if kind == "stuck"]
    assert len(notes) == 1 and "missing.txt" in notes[0]["content"]
    assert any("Loop detected" in text for text in contents(model.requests[4]))
    assert [(e.kind, e.action) for e in rig.log.of_type("stuck")] == [
        ("repeat", "note"),
        ("repeat", "pause"),
    ]


def test_an_agent_that_changes_course_after_the_note_goes_on(tmp_path):
    rig = Rig(tmp_path, FakeModel(), max_turns=12)

    def agent(sent):
        if not any("Loop detected" in text for text in contents(sent)):
            return reply("", call("file_read", path="missing.txt"))
        turn = len(rig.model.requests)
        return reply("", call("file_write", path=f"part{turn}.txt", content="done"))

    rig.model.then = agent
    end = rig.run()

    assert isinstance(end, StopRun) and end.reason == "max_turns"
    assert [e.action for e in rig.log.of_type("stuck")] == ["note"]


# --- idle replies ---------------------------------------------------------------------------


def test_a_reply_with_new_text_is_not_idle(tmp_path):
    chapters = iter(range(100))
    model = FakeModel(then=lambda sent: reply(f"Chapter {next(chapters)}: it was a dark night."))
    rig = Rig(tmp_path, model, max_turns=6, max_idle_turns=2)

    end = rig.run()

    assert isinstance(end, StopRun) and end.reason == "max_turns"
    assert not rig.log.of_type("idle")  # no pause between chapters
    assert model.requests[1][-1] == {"role": "user", "content": CONTINUE}


def test_a_repeated_reply_is_idle_and_pauses_as_configured(tmp_path):
    model = FakeModel(then=lambda sent: reply("Nothing more to do."))
    rig = Rig(tmp_path, model, max_idle_turns=4)
    rig.services.config.agent.idle_pause_max_secs = 0  # no waiting at all

    end = rig.run()

    assert isinstance(end, StopRun) and end.reason == "idle"
    assert len(model.requests) == 5  # the first says something new; four repeat it
    assert not rig.log.of_type("idle")  # a pause of 0 s is none


# --- a way in: `ouroboros tell` -------------------------------------------------------------


def test_a_message_left_for_the_agent_is_given_at_the_next_turn(tmp_path):
    rig = Rig(tmp_path, FakeModel(), max_turns=3)
    rig.services.state_dir = tmp_path / "state"

    def agent(sent):
        if len(rig.model.requests) == 1:
            post(tmp_path / "state", "Skip part 7: it is corrupt.")
        return reply("", call("file_write", path=f"{len(rig.model.requests)}.txt", content="x"))

    rig.model.then = agent
    rig.run()

    first, second = rig.model.requests[0], rig.model.requests[1]
    assert "Skip part 7: it is corrupt." not in contents(first)
    assert second[-1] == {"role": "user", "content": "Skip part 7: it is corrupt."}
    assert second[-2]["role"] == "tool"  # after the results of the turn before
    [told] = rig.log.of_type("user_message")
    assert told.text == "Skip part 7: it is corrupt." and told.queued_at.endswith("Z")
    assert waiting(tmp_path / "state") == []  # taken once


# --- the memory file ------------------------------------------------------------------------


def project(tmp_path, **agent):
    config = make_project(tmp_path, "http://127.0.0.1:9", prompt="MISSION", agent=agent)
    return load_config(config, {}, env={}, user_file=None)


def test_the_memory_file_and_agents_md_are_pinned_after_the_mission(tmp_path):
    loaded = project(tmp_path)
    (tmp_path / "workspace/NOTES.md").write_text("- part 3 is corrupt\n")
    (tmp_path / "workspace/AGENTS.md").write_text("Run the tests with make test.\n")

    prompt, warnings = system_message(loaded, SystemPrompt({}), 4.0)

    text = prompt.message["content"]
    assert warnings == []
    assert text.startswith("MISSION\n")
    assert (
        text.index("MISSION")
        < text.index("- part 3 is corrupt")
        < text.index("Run the tests with make test.")
    )
    assert "## Your memory: NOTES.md (yours to edit" in text
    assert "AGENTS.md: the workspace's instructions for agents (read-only" in text
    assert prompt.message.keys() == {"role", "content"}  # its marks are beside it
    assert prompt.pinned_memory == "NOTES.md"
    assert (
        prompt.mission()
        == SystemPrompt({"content": loaded.system_prompt_path.read_text()}).mission()
    )


def test_a_memory_over_its_budget_keeps_its_newest_part_and_says_so(tmp_path):
    loaded = project(tmp_path, memory_max_tokens=50)
    lines = [f"note {i:04d}: something learned" for i in range(2000)]
    (tmp_path / "workspace/NOTES.md").write_text("\n".join(lines) + "\n")

    prompt, warnings = system_message(loaded, SystemPrompt({}), 4.0)

    text = prompt.message["content"]
    assert "note 1999: something learned" in text and "note 0000" not in text
    assert "over its 50-token budget: only its newest part is shown" in text
    assert len(text) < 600
    assert warnings == [
        "NOTES.md is over agent.memory_max_tokens (50): only its newest part is pinned"
    ]


def test_a_memory_file_that_cannot_be_pinned_is_one_warning_and_the_run_goes_on(tmp_path):
    loaded = project(tmp_path)
    notes = tmp_path / "workspace/NOTES.md"
    outside = tmp_path / "secret.txt"
    outside.write_text("not for the agent")
    for make, said in [
        (lambda: notes.write_bytes(b"\x00\x01binary"), "is binary"),
        (lambda: os.symlink(outside, notes), "leads outside the workspace"),
        (lambda: notes.mkdir(), "is not a regular file"),
    ]:
        make()
        prompt, warnings = system_message(loaded, SystemPrompt({}), 4.0)
        assert len(warnings) == 1 and said in warnings[0], warnings
        assert prompt.message["content"].startswith("MISSION")
        assert "not for the agent" not in prompt.message["content"]
        assert prompt.pinned_memory is None
        notes.rmdir() if notes.is_dir() and not notes.is_symlink() else notes.unlink()


def test_a_huge_memory_file_is_read_only_as_far_as_its_budget(tmp_path):
    path = tmp_path / "NOTES.md"
    with path.open("w") as f:
        f.write("é old\n" * 2_000_000)  # 14 MB
        f.write("the newest line\n")
    pinned = read_pinned(tmp_path, "NOTES.md", 100, 4.0)
    assert pinned.cut and pinned.text is not None and pinned.text.endswith("the newest line\n")
    assert len(pinned.text) <= 400


# --- the handoff ----------------------------------------------------------------------------

WIND_DOWN_WORDS = ("wind down", "wind-down", "wrap up", "save your", "saving", "nearly full")


def digest_of(rig: Rig) -> Digest:
    digest = Digest()
    for event in rig.log.events:
        digest.take(event)
    return digest


def note_of(digest: Digest, chars: int = 1600, memory: str | None = None) -> str:
    return restart_note(
        digest,
        session=2,
        previous_turns=digest.turns,
        carried=True,
        facts_chars=chars,
        memory=memory,
    )


def test_the_handoff_says_what_the_run_wrote_ran_and_failed_at(tmp_path):
    model = FakeModel(
        [
            reply("", call("file_write", path="report.md", content="# Report")),
            reply("", call("file_read", path="gone.txt")),
            reply("", call("file_read", path="gone.txt")),
            reply("", call("file_write", path="notes/todo.md", content="next: 4")),
            reply("", call("file_write", path="notes/todo.md", content="next: 5")),
            reply("", call("task_complete", summary="ok")),
        ]
    )
    rig = Rig(tmp_path, model)
    rig.run()

    text = note_of(digest_of(rig), memory="NOTES.md")

    assert text.startswith(
        "[Session 2 of this run begins with a fresh context. Session 1 ended after 6 turns"
    )
    assert "- so far: 1 session, 6 turns, 6 tool calls" in text
    assert "- files written: report.md, notes/todo.md (2 writes)" in text
    assert "- failing again and again: file_read gone.txt (2 times)" in text
    # What to do first comes last, naming where the notes are.
    last = text.splitlines()[-1]
    assert last.startswith(
        "First, before you act: re-read your notes (NOTES.md, pinned in "
        "the system message; the files you keep them in: notes/todo.md)"
    )


def test_the_handoff_keeps_to_its_budget_and_its_frame(tmp_path):
    digest = Digest()
    digest.turns = digest.calls = 500
    for i in range(500):
        digest.wrote(f"src/module_{i:03d}_with_a_long_name.py")
        digest.commands.append((f"pytest tests/test_{i}.py -x -q", 1))
        digest.count_failure(f"file_read missing_{i % 40}.txt", "error: file not found")
        digest.count_failure(f"file_read missing_{i % 40}.txt", "error: file not found")

    text = note_of(digest, chars=400)
    bare = note_of(digest, chars=0)

    assert len(text) <= len(bare) + 500
    assert "src/module_499_with_a_long_name.py" in text  # the newest file kept
    assert "files written" not in bare and bare.splitlines()[-1].startswith("First,")
    assert len(digest.files) <= 30 and len(digest.failures) <= 20  # bounded as it folds


def test_a_restart_reads_in_the_order_things_happened_and_ends_with_what_to_do_first(tmp_path):
    model = FakeModel([reply("", call("file_write", path="chapter1.md", content="..."))])
    rig = Rig(tmp_path, model)
    rig.state.reload = "requested"
    model.script.append(
        reply(
            "Saving my notes now, as told to wind down.",
            call("file_write", path="chapter1.md", content="more"),
        )
    )
    rig.run()

    from ouroboros.loop.restart import begin_session, fresh_start
    from tests.session_rig import SYSTEM

    fitted = fresh_start(
        rig.state, dict(SYSTEM), rig.toolbox.schemas(), rig.policy, None, facts_chars=800
    )
    begin_session(rig.state, fitted.messages)

    messages = rig.state.messages
    assert messages[0]["role"] == "system"
    assert messages[1]["content"].startswith("[Carried over from session 1")
    assert messages[2]["role"] == "assistant"  # the carried turns, in order
    last = messages[-1]
    assert messages.notes[-1] == "restart" and "chapter1.md (2 writes)" in last["content"]
    assert last["content"].splitlines()[-1].startswith("First, before you act: re-read")
    # Nothing of the old session's wind-down reads as if it still applied.
    notes = [m["content"] for m, kind in zip(messages, messages.notes) if kind]
    assert not any(word in note.lower() for note in notes for word in WIND_DOWN_WORDS)
    assert "wind_down" not in messages.notes


def wound_down_after_two_big_reads(tmp_path) -> Rig:
    """A session that read two big files and was wound down (a reload): what its restart
    carries fills much of a 4,000-token window."""
    model = FakeModel([])
    rig = Rig(tmp_path, model, limit=4000, carryover_turns=3)
    model.script.extend([reads(rig, 2400)] * 2 + [reply("Saved my notes.")])
    rig.state.reload = "requested"
    rig.run()
    return rig


def test_room_short_drops_carried_turns_before_the_handoff(tmp_path):
    from ouroboros.loop.restart import begin_session, fresh_start
    from tests.session_rig import SYSTEM

    rig = wound_down_after_two_big_reads(tmp_path)
    context = rig.state.context
    masked_before = context.total_masked

    fitted = fresh_start(
        rig.state,
        dict(SYSTEM),
        rig.toolbox.schemas(),
        rig.policy,
        None,
        facts_chars=int(rig.policy.handoff_max_tokens * 4),
    )
    begin_session(rig.state, fitted.messages)

    messages = rig.state.messages
    assert "What the harness logged of this run" in messages[-1]["content"]
    assert fitted.dropped_turns or fitted.masked  # the carried turns made the room
    assert context.total_masked == masked_before + len(fitted.masked)
    calls = {c["id"] for m in messages for c in m.get("tool_calls") or ()}
    results = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
    assert calls == results  # no carried call without its result, nor the other way


def test_a_handoff_too_long_for_the_room_is_cut_never_the_carried_pairs(tmp_path):
    from ouroboros.loop.restart import begin_session, fresh_start
    from tests.session_rig import SYSTEM

    rig = wound_down_after_two_big_reads(tmp_path)
    for i in range(400):
        rig.state.digest.wrote(f"a/rather/long/path/to/file_{i}.txt")

    fitted = fresh_start(
        rig.state, dict(SYSTEM), rig.toolbox.schemas(), rig.policy, None, facts_chars=100_000
    )
    begin_session(rig.state, fitted.messages)

    messages = rig.state.messages
    assert messages.notes[-1] == "restart"
    assert messages[-1]["content"].splitlines()[-1].startswith("First, before you act")
    calls = {c["id"] for m in messages for c in m.get("tool_calls") or ()}
    assert calls == {m["tool_call_id"] for m in messages if m["role"] == "tool"}
    assert rig.state.context.used_pct(fitted.tokens) < rig.policy.hard_threshold_pct


def test_an_edit_of_the_memory_is_not_an_edit_of_the_mission():
    from ouroboros.loop.memory import mission_changed, mission_prompt

    before = mission_prompt("Count parts.\n\n---\n\nnotes: part 3", "Count parts.")
    notes_edited = mission_prompt("Count parts.\n\n---\n\nnotes: part 4", "Count parts.")
    mission_edited = mission_prompt("Count all parts.\n\n---\n\nnotes: part 4", "Count all parts.")

    assert mission_changed(before, notes_edited) is None
    assert mission_changed(notes_edited, mission_edited) == (12, 16)
    assert before.message.keys() == {"role", "content"}
    unmarked = SystemPrompt({"role": "system", "content": "old"})  # a state from before marks
    assert mission_changed(unmarked, SystemPrompt({"role": "system", "content": "new"})) == (3, 3)


# --- work done again ------------------------------------------------------------------------


def writes(start: int, count: int) -> list:
    return [
        reply("", call("file_write", path=f"part_{i}.txt", content=f"part {i} done"))
        for i in range(start, start + count)
    ]


def test_work_an_earlier_session_did_is_named_once_then_the_run_pauses(tmp_path):
    model = FakeModel(writes(0, 14) + [reply("", call("task_complete", summary="x"))])
    rig = Rig(tmp_path, model, agent={"redo_notice_repeats": 3, "redo_pause_repeats": 12})
    assert rig.run().reason == "task_complete"  # session 1 did parts 0-13
    rig.restart()
    model.script.extend(writes(14, 2) + writes(0, 14))  # two new, then all of it again

    end = rig.run()

    assert isinstance(end, StopRun) and end.reason == "redoing"
    stuck = [(e.kind, e.action) for e in rig.log.of_type("stuck")]
    assert stuck == [("redoing", "note"), ("redoing", "pause")]
    held = rig.state.messages
    [note] = [m["content"] for m, kind in zip(held, held.notes) if kind == "redoing"]
    assert note.startswith("[Work done again: 3 of this session's 5 writes and commands")
    assert "file_write part_2.txt` (already done in session 1)" in note
    # Told after the third repeat; paused at the twelfth, when repeats were most of the work.
    assert len(model.requests) - 15 == 2 + 12  # session 1 asked 15 times


def test_the_same_call_in_the_same_session_or_new_work_is_not_work_done_again(tmp_path):
    model = FakeModel(writes(0, 5) + writes(0, 5) + [reply("", call("task_complete", summary="x"))])
    rig = Rig(tmp_path, model, agent={"redo_notice_repeats": 1, "redo_pause_repeats": 1})
    assert rig.run().reason == "task_complete"  # rewriting a file in its own session
    rig.restart()
    model.script.extend(writes(5, 20) + [reply("", call("task_complete", summary="x"))])
    assert rig.run().reason == "task_complete"
    assert not rig.log.of_type("stuck")


def test_running_the_same_checks_again_and_again_is_not_work_done_again(tmp_path):
    """An agent that writes its notes the same way every few turns, as the session before did
    (its tests, `git status` in a real run), is working, not redoing: each call counts once a
    session."""
    same = reply("", call("file_write", path="status.txt", content="tests pass"))
    model = FakeModel(
        [same, *writes(0, 2), same, same, reply("", call("task_complete", summary="x"))]
    )
    rig = Rig(tmp_path, model, agent={"redo_notice_repeats": 2, "redo_pause_repeats": 3})
    assert rig.run().reason == "task_complete"
    rig.restart()
    work = [step for i in range(20) for step in (same, *writes(100 + i, 1))]
    model.script.extend([*work, reply("", call("task_complete", summary="x"))])
    assert rig.run().reason == "task_complete"
    assert not rig.log.of_type("stuck")


def test_short_sessions_that_each_redo_the_same_step_add_up_to_a_pause(tmp_path):
    """A window that holds one step a session: every session restarts into the same two
    writes and ends, each far too short to reach the pause alone. In a row they count
    together: told in session 3, paused in session 7, not restarting for ever."""
    model = FakeModel(writes(0, 2) + [reply("", call("task_complete", summary="x"))])
    limits = {"redo_notice_repeats": 3, "redo_pause_repeats": 12}
    rig = Rig(tmp_path, model, agent={**limits, "stuck_repeats": 0, "stuck_cycles": 0})
    ends = [rig.run()]
    while not isinstance(ends[-1], StopRun) or ends[-1].reason != "redoing":
        assert len(ends) < 10, "short sessions redoing the same step never paused the run"
        rig.restart()
        model.script.extend(writes(0, 2) + [reply("", call("task_complete", summary="x"))])
        ends.append(rig.run())

    assert len(ends) == 7
    stuck = [(e.kind, e.action, e.session) for e in rig.log.of_type("stuck")]
    assert stuck[0] == ("redoing", "note", 3) and stuck[-1] == ("redoing", "pause", 7)
    assert "(and 10 in the sessions just before it)" in rig.log.of_type("stuck")[-1].detail


def test_a_session_of_new_work_ends_the_run_of_short_redoing_ones(tmp_path):
    model = FakeModel(writes(0, 2) + [reply("", call("task_complete", summary="x"))])
    rig = Rig(tmp_path, model, agent={"redo_notice_repeats": 0, "redo_pause_repeats": 6})
    assert rig.run().reason == "task_complete"
    for session in range(12):
        rig.restart()
        new = writes(100 + 3 * session, 3) if session % 2 else []  # every other one moves on
        model.script.extend(new + writes(0, 2) + [reply("", call("task_complete", summary="x"))])
        assert rig.run().reason == "task_complete"
    assert not rig.log.of_type("stuck")


def test_long_sessions_that_write_the_same_status_each_time_are_not_short_redoing_ones(tmp_path):
    """A monitoring loop: every session reads for a while and writes the same status file
    as the one before. Each session stands alone: no note, no pause, however many."""
    status = reply("", call("file_write", path="status.txt", content="all good"))
    look = reply("", call("list_dir", path="."))
    model = FakeModel([status, *[look] * 12, reply("", call("task_complete", summary="x"))])
    limits = {"redo_notice_repeats": 3, "redo_pause_repeats": 6}
    rig = Rig(tmp_path, model, agent={**limits, "stuck_repeats": 0, "stuck_cycles": 0})
    assert rig.run().reason == "task_complete"
    for _ in range(10):
        rig.restart()
        model.script.extend([status, *[look] * 12, reply("", call("task_complete", summary="x"))])
        assert rig.run().reason == "task_complete"
    assert not rig.log.of_type("stuck")


def test_the_redo_check_is_a_pure_decision():
    from ouroboros.loop.guards import redoing

    limits = {"notice_after": 3, "pause_after": 12}
    assert redoing(2, 10, False, **limits) is None
    assert redoing(3, 10, False, **limits) == "note"
    assert redoing(3, 10, True, **limits) is None  # told once a session
    assert redoing(12, 20, True, **limits) == "pause"
    assert redoing(12, 24, True, **limits) is None  # half new work: going somewhere
    assert redoing(50, 60, False, notice_after=0, pause_after=0) is None  # both off
    # short sessions in a row, mostly repeats, count together
    assert redoing(2, 2, False, **limits, before=9) == "note"
    assert redoing(2, 2, True, **limits, before=9) is None
    assert redoing(2, 2, True, **limits, before=10) == "pause"
    assert redoing(2, 5, True, **limits, before=10) is None  # this one moves on
    assert redoing(0, 0, False, **limits, before=10) is None  # nothing repeated yet


def test_the_digest_survives_a_snapshot_whole(tmp_path):
    model = FakeModel(
        writes(0, 3)
        + [reply("", call("file_read", path="gone.txt"))] * 2
        + [reply("", call("task_complete", summary="x"))]
    )
    rig = Rig(tmp_path, model)
    rig.run()
    rig.restart()
    import json

    from ouroboros.loop.state import RunState

    saved = json.loads(json.dumps(rig.state.to_dict()))
    back = RunState.from_dict(saved, rig.policy)
    assert back.digest == rig.state.digest
    assert list(back.digest.files) == ["part_0.txt", "part_1.txt", "part_2.txt"]
    assert back.digest.sessions_turns == 6 and back.digest.turns == 0


# --- what the agent needs to go on ----------------------------------------------------------


def test_the_newest_read_of_the_agents_notes_is_never_masked_nor_dropped():
    """A fit that must mask and drop: the newest read of a file the agent writes (its
    notes) stays whole in the oldest turn while the turns after it go; an older read of the
    same file may go."""
    from ouroboros.protocols import ToolResult
    from ouroboros.window import conversation as conv
    from tests.conversations import answer, asked, manager, tool_call

    cm = manager(limit=6_000, keep_recent_observations=1)
    notes = "DONE: " + ", ".join(f"part {i}" for i in range(160))
    messages = [{"role": "system", "content": "mission"}, conv.note("continue", "go")]

    def turn(call_id: str, name: str, path: str, content: str) -> None:
        call = tool_call(call_id, name, path=path)
        messages.append(asked(call))
        messages.append(answer(cm, call, ToolResult(content, meta={"path": path}), path))

    turn("r0", "file_read", "notes.md", notes)  # an older read
    turn("w0", "file_write", "notes.md", "wrote 900 bytes")
    turn("r1", "file_read", "notes.md", notes)  # the newest: what the agent goes on
    for i in range(6):
        turn(f"d{i}", "file_read", f"data/{i}.txt", f"KEY: {i}\n" + "x" * 6_000)

    fitted = cm.fit(messages, [], target=2_500)

    kept = {m["tool_call_id"]: m["content"] for m in fitted.messages if m["role"] == "tool"}
    assert kept["r1"] == notes
    assert fitted.dropped_turns and "r0" not in kept or "masked" in kept.get("r0", "masked")
    assert "d0" not in kept or "masked" in kept["d0"]  # the data went first
