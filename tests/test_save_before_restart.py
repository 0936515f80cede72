"""Issue 36, items 1-2: the save before a restart is never stale. What the agent needs to
save (the newest read of its notes, what it did since) is the last to go when room must be
made; work done after the save is saved again before the restart."""

from __future__ import annotations

from ouroboros.config import ContextConfig
from ouroboros.protocols import ToolResult
from ouroboros.window import conversation as conv
from ouroboros.window.policy import Continue, Restart, WindDown, decide
from tests.conversations import asked, held, manager, tool_call


def step(call_id, name, args, content, **meta):
    """One tool call, what it was about, and its result."""
    subject = args.get("path") or args.get("command", "")
    result = ToolResult(content, meta={"path": args.get("path"), **meta})
    return tool_call(call_id, name, **args), subject, result


def turn_of(cm, messages, *steps):
    """One turn of these calls, their results registered with the manager as the loop does."""
    messages.append(asked(*(call for call, _, _ in steps)))
    for call, subject, result in steps:
        cm.add_result(messages, call, subject, result)


def recording(call_id, part):
    command = f"echo 'part_{part:03d}: abc' >> results.txt"
    return step(
        call_id, "shell_exec", {"command": command}, "[exit code 0]", command=command, exit_code=0
    )


def saving(call_id, text="DONE: 1-2\nNEXT: 3\n"):
    args = {"path": "notes.md", "content": text}
    return step(call_id, "file_write", args, "wrote 20 bytes (2 lines) to notes.md")


def reading(call_id, path, content):
    return step(call_id, "file_read", {"path": path}, content)


def record(cm, messages, call_id, part):
    turn_of(cm, messages, recording(call_id, part))


def save(cm, messages, call_id, text="DONE: 1-2\nNEXT: 3\n"):
    turn_of(cm, messages, saving(call_id, text))


def read(cm, messages, call_id, path, content):
    turn_of(cm, messages, reading(call_id, path, content))


def turn(cm, messages, call_id, name, args, content, **meta):
    turn_of(cm, messages, step(call_id, name, args, content, **meta))


def session_at_the_wind_down(cm):
    """A session that read its notes first, recorded two parts, read a third, and was told
    to save: the pre-flight of the save's request must make room."""
    messages = held(
        cm, [{"role": "system", "content": "mission " * 40}, conv.note("restart", "go")]
    )
    save(cm, held(cm, []), "w0", "DONE: 1-2\nNEXT: 3\n")  # the previous session wrote them
    read(cm, messages, "n1", "notes.md", "DONE: 1-2\nNEXT: 3\n" + "Thoughts. " * 60)
    for part, call_id in ((3, "r3"), (4, "r4")):
        read(cm, messages, f"p{part}", f"data/part_{part:03d}.txt", "KEY: 1\n" + "x" * 1600)
        record(cm, messages, call_id, part)
    read(cm, messages, "p5", "data/part_005.txt", "KEY: 5\n" + "x" * 1600)
    messages.add_note("wind_down", "Save your progress now.")
    cm.wound_down = True
    return messages


def visible(messages):
    return {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}


def test_at_a_wind_down_the_notes_read_and_the_records_since_are_not_what_goes():
    cm = manager(limit=3_000)
    messages = session_at_the_wind_down(cm)
    other = manager(limit=3_000)
    older_masked = other.fit(
        session_at_the_wind_down(other), [], target=cm.current_tokens(messages, []) - 900
    )
    assert older_masked.masked == ["p3", "p4"] and not older_masked.dropped_turns
    target = older_masked.tokens - 150  # more than the older reads free
    fitted = cm.fit(held(cm, messages.records), [], target=target)  # fitted apart
    seen = visible(fitted.messages)
    assert seen["n1"].startswith("DONE: 1-2")  # the notes, whole
    assert seen["r3"] == seen["r4"] == "[exit code 0]"  # the records since
    assert "p5" in fitted.masked  # the newest read goes before them: the save needs none
    assert fitted.tokens <= target


def test_the_notes_read_goes_only_when_nothing_else_can():
    cm = manager(limit=3_000)
    messages = session_at_the_wind_down(cm)
    fitted = cm.fit(held(cm, messages.records), [], target=200)  # all but the newest turn go
    assert "n1" not in visible(fitted.messages)
    assert fitted.messages[-1] == messages[-1] and "p5" in visible(fitted.messages)


def test_work_after_the_save_is_unsaved_until_saved_again_or_asked_once():
    cm = manager()
    messages = held(cm, [{"role": "system", "content": "mission"}, conv.note("wind_down", "save")])

    def unsaved() -> bool:
        return conv.unsaved_work(messages, messages.notes, cm.observations)

    save(cm, messages, "w1")
    assert not unsaved()  # the save is the last thing
    record(cm, messages, "r5", 5)
    assert unsaved()  # a record after it
    messages.add_note("wind_down", "save again")
    assert not unsaved()  # asked again: asked once only
    save(cm, messages, "w2")
    record(cm, messages, "r6", 6)
    read(cm, messages, "p7", "data/part_007.txt", "KEY: 7")
    assert unsaved()
    save(cm, messages, "w3")
    assert not unsaved()


def test_after_a_wind_down_work_since_the_save_is_saved_again_before_the_restart():
    policy = ContextConfig()
    assert decide(policy, 0.95, [], True, unsaved=True) == (WindDown(), True)
    decision, wound = decide(policy, 0.95, [], True, unsaved=False)
    assert isinstance(decision, Restart) and wound


def test_the_manager_asks_for_the_save_again_when_work_followed_it():
    cm = manager(limit=3_000, keep_recent_observations=1)
    messages = held(cm, [{"role": "system", "content": "mission"}, conv.note("wind_down", "save")])
    save(cm, messages, "w1")
    record(cm, messages, "r5", 5)
    cm.wound_down = True
    assert cm.evaluate(int(0.95 * cm.budget), messages) == WindDown()
    messages.add_note("wind_down", "save again")
    save(cm, messages, "w2")
    assert isinstance(cm.evaluate(int(0.95 * cm.budget), messages), Restart)


def test_at_a_wind_down_a_recall_acted_on_goes_before_the_newest_read():
    """A session that began by recalling the part it was on (masked at the restart),
    recorded and saved it, read the next part and was told to save: the recall is a read
    the save does not need, so its turn goes before the newest read is masked."""

    def session(cm):
        messages = held(
            cm, [{"role": "system", "content": "mission " * 40}, conv.note("restart", "go")]
        )
        turn(cm, messages, "q1", "recall", {"id": "obs-0"}, "KEY: 1\n" + "x" * 1600)
        record(cm, messages, "r1", 1)
        save(cm, messages, "w1", "DONE: 1\nNEXT: 2\n")
        read(cm, messages, "p2", "data/part_002.txt", "KEY: 2\n" + "x" * 1600)
        messages.add_note("wind_down", "Save your progress now.")
        cm.wound_down = True
        return messages

    cm, other = manager(limit=3_000), manager(limit=3_000)
    messages = session(cm)
    recall_masked = other.fit(session(other), [], target=0)
    assert recall_masked.masked[0] == "q1"
    before, third = cm.current_tokens(messages, []), manager(limit=3_000)
    masked_only = third.current_tokens(third.mask(session(third), ["q1"]), [])
    target = masked_only - 10  # more than masking the recall frees: its turn must go
    fitted = cm.fit(held(cm, messages.records), [], target=target)
    assert before - masked_only > 400  # the recall was big
    seen = visible(fitted.messages)
    assert "q1" not in seen and fitted.dropped_turns == 1
    assert seen["p2"].startswith("KEY: 2")  # the part the agent is on, whole
    assert seen["r1"] == "[exit code 0]" and seen["w1"].startswith("wrote")


def test_no_wind_down_that_can_only_ask_for_the_save_just_made_blind_to_what_was_read():
    """A window that holds the mission and one part: the agent saved after its record and
    read the next part, and the context is over the budget. Wound down, the pre-flight
    would have to mask that read: the agent would be told to save what it saved, unable to
    see what it read. The session restarts at once (the read carries over); with work after
    the save, or a read the wound-down prompt still holds, it winds down as before."""

    def session(part_chars, work_after_save=False, saved_with_the_read=False, words=500):
        cm = manager(limit=2_000)
        messages = held(
            cm, [{"role": "system", "content": "mission " * words}, conv.note("restart", "go")]
        )
        record(cm, messages, "r1", 1)
        saved = saving("w1", "DONE: 1\nNEXT: 2\n")
        read_next = reading("p2", "data/part_002.txt", "KEY: 2\n" + "x" * part_chars)
        if saved_with_the_read:  # one turn that saved and read: its reply holds both calls
            turn_of(cm, messages, saved, read_next)
            return cm, messages
        turn_of(cm, messages, saved)
        if work_after_save:
            record(cm, messages, "r2", 2)
        turn_of(cm, messages, read_next)
        return cm, messages

    cm, messages = session(1_600)
    end = cm.after_turn(messages, [])
    assert isinstance(end.decision, Restart), end.decision
    assert "could not show it what it just read" in end.decision.reason
    assert messages.notes[-1] != "wind_down"  # no wind-down note was added

    cm, messages = session(1_600, work_after_save=True)
    assert isinstance(cm.after_turn(messages, []).decision, WindDown)  # the record is unsaved

    # the save is the newest turn's: that turn is let go on for its read (read_after_save)
    cm, messages = session(1_600, saved_with_the_read=True)
    assert [m["role"] for m in messages[-3:]] == ["assistant", "tool", "tool"]
    assert isinstance(cm.after_turn(messages, []).decision, Continue)
    # and over the budget, it winds down (the save it would repeat is what it saves from)
    cm, messages = session(1_600, saved_with_the_read=True, words=560)
    assert cm.current_tokens(messages, []) > cm.budget
    assert isinstance(cm.after_turn(messages, []).decision, WindDown)

    cm, messages = session(1_200)  # a read the wound-down prompt holds: the agent acts on it
    tokens = cm.current_tokens(messages, [])
    assert tokens > cm.policy.hard_threshold_pct * cm.budget
    assert isinstance(cm.after_turn(messages, []).decision, WindDown)
