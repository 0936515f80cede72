"""An unattended session, driven directly (tests/session_rig.py): the stuck-loop guard's note
and pause, idle replies with new text, messages from `ouroboros tell`, the memory file pinned
in the system message, and the handoff a restart begins with."""

from __future__ import annotations

import os

from ouroboros.config import load_config
from ouroboros.loop.endings import StopRun
from ouroboros.loop.handoff import Digest, handoff_text
from ouroboros.loop.inbox import post, waiting
from ouroboros.loop.memory import read_pinned, system_message
from ouroboros.window.conversation import NOTE_KEY
from tests.fakes import FakeModel, call, reply
from tests.helpers import make_project
from tests.session_rig import CONTINUE, Rig, contents

# --- the stuck-loop guard -------------------------------------------------------------------


def test_a_repeated_failing_call_gets_a_note_then_pauses_the_run(tmp_path):
    model = FakeModel(then=lambda sent: reply("", call("file_read", path="missing.txt")))
    rig = Rig(tmp_path, model)

    end = rig.run()

    assert isinstance(end, StopRun) and end.reason == "stuck"
    assert len(model.requests) == 8  # 4 to see the loop, 4 more once told
    notes = [m for m in rig.state.messages if m.get(NOTE_KEY) == "stuck"]
    assert len(notes) == 1 and "missing.txt" in notes[0]["content"]
    assert any("Loop detected" in text for text in contents(model.requests[4]))
    assert [(e.kind, e.action) for e in rig.log.of_type("stuck")] == [
        ("repeat", "note"), ("repeat", "pause")]


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

    message, warnings = system_message(loaded, {}, 4.0)

    text = message["content"]
    assert warnings == []
    assert text.startswith("MISSION\n")
    assert text.index("MISSION") < text.index("- part 3 is corrupt") < \
        text.index("Run the tests with make test.")
    assert "## Your memory: NOTES.md (yours to edit" in text
    assert "AGENTS.md: the workspace's instructions for agents (read-only" in text


def test_a_memory_over_its_budget_keeps_its_newest_part_and_says_so(tmp_path):
    loaded = project(tmp_path, memory_max_tokens=50)
    lines = [f"note {i:04d}: something learned" for i in range(2000)]
    (tmp_path / "workspace/NOTES.md").write_text("\n".join(lines) + "\n")

    message, warnings = system_message(loaded, {}, 4.0)

    text = message["content"]
    assert "note 1999: something learned" in text and "note 0000" not in text
    assert "over its 50-token budget: only its newest part is shown" in text
    assert len(text) < 600
    assert warnings == ["NOTES.md is over agent.memory_max_tokens (50): only its newest part "
                        "is pinned"]


def test_a_memory_file_that_cannot_be_pinned_is_one_warning_and_the_run_goes_on(tmp_path):
    loaded = project(tmp_path)
    notes = tmp_path / "workspace/NOTES.md"
    outside = tmp_path / "secret.txt"
    outside.write_text("not for the agent")
    for make, said in [(lambda: notes.write_bytes(b"\x00\x01binary"), "is binary"),
                       (lambda: os.symlink(outside, notes), "leads outside the workspace"),
                       (lambda: notes.mkdir(), "is not a regular file")]:
        make()
        message, warnings = system_message(loaded, {}, 4.0)
        assert len(warnings) == 1 and said in warnings[0], warnings
        assert message["content"].startswith("MISSION")
        assert "not for the agent" not in message["content"]
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


def digest_of(rig: Rig) -> Digest:
    digest = Digest()
    for event in rig.log.events:
        digest.take(event)
    return digest


def test_the_handoff_says_what_the_session_wrote_ran_and_failed_at(tmp_path):
    model = FakeModel([
        reply("", call("file_write", path="report.md", content="# Report")),
        reply("", call("file_read", path="gone.txt")),
        reply("", call("file_read", path="gone.txt")),
        reply("", call("file_write", path="notes/todo.md", content="next: 4")),
        reply("", call("task_complete", summary="ok"))])
    rig = Rig(tmp_path, model)
    rig.run()

    text = handoff_text(digest_of(rig), session=1, reason="context full", max_tokens=400,
                        chars_per_token=4.0)

    assert text.startswith("[Handoff from session 1, built by the harness from its log "
                           "(context full): 5 turns, 5 tool calls, 2 failed.")
    assert "Files written: report.md, notes/todo.md" in text
    assert "Failing repeatedly: file_read gone.txt (2 times)" in text


def test_the_handoff_keeps_to_its_budget(tmp_path):
    digest = Digest()
    digest.turns = digest.calls = 500
    for i in range(500):
        digest.wrote(f"src/module_{i:03d}_with_a_long_name.py")
        digest.commands.append((f"pytest tests/test_{i}.py -x -q", 1))
        digest.count_failure(f"file_read missing_{i % 40}.txt", "error: file not found")
        digest.count_failure(f"file_read missing_{i % 40}.txt", "error: file not found")

    text = handoff_text(digest, session=9, reason="context full", max_tokens=100,
                        chars_per_token=4.0)

    assert len(text) <= 400
    assert "src/module_499_with_a_long_name.py" in text  # the newest file kept
    assert len(digest.files) <= 30 and len(digest.failures) <= 20  # bounded as it folds


def test_a_restart_begins_with_the_handoff_before_the_carried_turns(tmp_path):
    model = FakeModel([reply("", call("file_write", path="chapter1.md", content="..."))])
    rig = Rig(tmp_path, model)
    rig.state.reload = "requested"
    model.script.append(reply("Saved my notes."))
    rig.run()

    from ouroboros.loop.restart import fresh_start, begin_session
    from tests.session_rig import SYSTEM
    text = handoff_text(digest_of(rig), session=1, reason="reload", max_tokens=200,
                        chars_per_token=4.0)
    fitted = fresh_start(rig.state, dict(SYSTEM), rig.toolbox.schemas(), rig.policy, None,
                         text)
    begin_session(rig.state, fitted.messages)

    messages = rig.state.messages
    assert messages[1]["content"].startswith("[Session restarted.")
    assert messages[2][NOTE_KEY] == "handoff" and "chapter1.md" in messages[2]["content"]
    assert 'Your note when told to wind down: "Saved my notes."' in messages[2]["content"]
    assert messages[3]["role"] == "assistant"  # the carried turns follow


def test_an_edit_of_the_memory_is_not_an_edit_of_the_mission():
    from ouroboros.loop.memory import mission_changed, mission_message

    before = mission_message("Count parts.\n\n---\n\nnotes: part 3", "Count parts.")
    notes_edited = mission_message("Count parts.\n\n---\n\nnotes: part 4", "Count parts.")
    mission_edited = mission_message("Count all parts.\n\n---\n\nnotes: part 4",
                                     "Count all parts.")

    assert mission_changed(before, notes_edited) is None
    assert mission_changed(notes_edited, mission_edited) == (12, 16)
    assert mission_changed({"role": "system", "content": "old"},
                           {"role": "system", "content": "new"}) == (3, 3)


def test_a_handoff_left_out_for_room_masks_and_counts_nothing_of_its_own(tmp_path):
    from ouroboros.loop.restart import begin_session, fresh_start, handed_over
    from tests.session_rig import SYSTEM, reads

    model = FakeModel([])
    rig = Rig(tmp_path, model, limit=4000, carryover_turns=3)
    model.script.extend([reads(rig, 2400)] * 2 + [reply("Saved my notes.")])
    rig.state.reload = "requested"
    rig.run()
    context = rig.state.context
    masked_before = context.total_masked

    fitted = fresh_start(rig.state, dict(SYSTEM), rig.toolbox.schemas(), rig.policy, None,
                         "a handoff far too long for the room left " * 400)
    begin_session(rig.state, fitted.messages)

    kept = [m for m in rig.state.messages if m["role"] == "tool"]
    shown = {m["tool_call_id"] for m in kept if m["content"].startswith("PART")}
    assert shown and not handed_over(rig.state.messages)  # the results carried whole
    assert context.total_masked == masked_before + len(fitted.masked)
    assert not any(context.observations[i].masked for i in shown)  # each can still be masked
