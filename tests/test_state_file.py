"""state.json: one versioned state, written whole (store/state_file.py). It reads back as it was
written; each kind of damage is DamagedSnapshot saying what is wrong (a resume rebuilds from
the log, saying why); a newer schema is refused; a bug is raised, not taken for damage. A run
written before the state was versioned (a snapshot and checkpoints) still resumes to the same
conversation, and a call started but not answered when the process died is answered as
interrupted."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from ouroboros.config import ContextConfig
from ouroboros.errors import UsageError
from ouroboros.loop.endings import RestartSession
from ouroboros.loop.memory import SystemMarks, fingerprint
from ouroboros.loop.resume import recover
from ouroboros.loop.state import RunState
from ouroboros.protocols import ToolCall, ToolResult
from ouroboros.store import events as ev
from ouroboros.store.log import EVENTS_FILE, EventLog
from ouroboros.store.observations import OBSERVATIONS_DIR, ObservationStore
from ouroboros.store.state_file import (
    CURRENT_SCHEMA_VERSION,
    MARK_KEYS,
    STATE_FILE,
    DamagedSnapshot,
    StateWriter,
    read_state,
    upgrade,
    write_state,
)
from ouroboros.window.conversation import pending_calls
from ouroboros.window.manager import ContextManager
from ouroboros.window.probes import DOUBT_EVERY
from tests.fakes import FakeModel
from tests.session_rig import Rig, reads

LEGACY = Path(__file__).parent / "data" / "legacy_run_v1"
CALL = ToolCall("c1", "file_read", '{"path": "a.txt"}')


def a_state(**fields: Any) -> RunState:
    context = ContextManager.create(8192, "config", 1024, ContextConfig())
    messages = [
        {"role": "system", "content": "Mission."},
        {"role": "assistant", "content": "Reading.", "tool_calls": [CALL.to_wire()]},
    ]
    return RunState("run1", messages, context, **fields)


def plain(value: Any) -> Any:
    return json.loads(json.dumps(value))


def state_at_its_start() -> RunState:
    """The state of a run before its first reply: the mission, and the person's "Go."."""
    context = ContextManager.create(8192, "config", 1024, ContextConfig())
    messages = [{"role": "system", "content": "Mission."}, {"role": "user", "content": "Go."}]
    return RunState("run1", messages, context)


def run_at_its_start(tmp_path: Path) -> tuple[Path, EventLog]:
    """A run that has logged its start, its state written as of it (state_at_its_start)."""
    run = tmp_path / "run1"
    log = EventLog(run / EVENTS_FILE)
    log.emit(ev.RunStart(run_id="run1", version="0.1.0", pid=1, config={}))
    write_state(run, log.seq, state_at_its_start().to_dict())
    return run, log


def started_run(tmp_path: Path) -> tuple[Path, EventLog]:
    """A run whose first reply asked for CALL, its state written as of that reply."""
    run = tmp_path / "run1"
    log = EventLog(run / EVENTS_FILE)
    log.emit(ev.RunStart(run_id="run1", version="0.1.0", pid=1, config={}))
    log.turn = 1
    log.emit(ev.Assistant(text="Reading.", finish_reason="tool_calls", tool_calls=[asdict(CALL)]))
    write_state(run, log.seq, a_state(session_turns=1, total_turns=1).to_dict())
    return run, log


# -- the file --


def test_the_state_reads_back_as_written_with_its_version_and_seq(tmp_path):
    state = a_state(total_turns=3, warned=["brief_tools"])
    state.messages.add_result("c1", "the token is s3cret")

    write_state(tmp_path, 41, state.to_dict(), lambda text: text.replace("s3cret", "[REDACTED]"))

    on_disk = json.loads((tmp_path / STATE_FILE).read_text())
    assert on_disk["schema_version"] == CURRENT_SCHEMA_VERSION == 3
    saved = read_state(tmp_path)
    assert (saved.schema_version, saved.seq) == (3, 41)
    assert saved.state["messages"][-1]["content"] == "the token is [REDACTED]"
    back = RunState.from_dict(saved.state, ContextConfig())
    assert back.total_turns == 3 and back.warned == ["brief_tools"]
    assert plain(back.to_dict()) == plain(saved.state)


def test_no_state_file_is_none(tmp_path):
    assert read_state(tmp_path) is None


def written(tmp_path: Path, data: Any) -> Path:
    (tmp_path / STATE_FILE).write_text(data if isinstance(data, str) else json.dumps(data))
    return tmp_path


def whole() -> dict[str, Any]:
    return {"schema_version": 3, "seq": 4, "state": plain(a_state().to_dict())}


def changed(path: str, value: Any) -> dict[str, Any]:
    """The whole state with the value at the dotted `path` replaced (deleted: ...)."""
    data = whole()
    *parents, last = path.split(".")
    where = data
    for key in parents:
        where = where[int(key)] if isinstance(where, list) else where[key]
    if value is ...:
        del where[last]
    else:
        where[int(last) if isinstance(where, list) else last] = value
    return data


DAMAGE = {
    "truncated": ('{"schema_version": 3, "seq": 4, "sta', "is not JSON"),
    "empty": ("", "is not JSON"),
    "a list": ([1, 2], "not a JSON object"),
    "no seq": (changed("seq", ...), "seq: Field required"),
    "a seq in words": (changed("seq", "four"), "seq: Input should be a valid integer"),
    "no run id": (changed("state.run_id", ...), "state.run_id: Field required"),
    "no messages": (changed("state.messages", []), "state.messages: List should have at least"),
    "a message of no role": (changed("state.messages.1.role", ...), "state.messages.1.role"),
    "a call without an id": (
        changed("state.messages.1.tool_calls", [{"function": {"name": "x"}}]),
        "state.messages.1.tool_calls.0.id: Field required",
    ),
    "a count as text": (changed("state.total_turns", "3"), "state.total_turns"),
    "no observations": (changed("state.context.observations", ...), "observations: Field"),
    "a schema version in words": (changed("schema_version", "3"), "schema_version '3'"),
    "sizes not by position": (changed("state.tokens", [None]), "2 messages, 1 tokens, 2 notes"),
    "a size in words": (changed("state.tokens.0", "12"), "state.tokens.0"),
    "a note of no kind": (changed("state.notes.1", 1), "state.notes.1"),
    "a digest of the wrong shape": (changed("state.digest.failures", 3), "state.digest"),
}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_each_kind_of_damage_says_what_is_wrong(tmp_path, kind):
    data, why = DAMAGE[kind]
    with pytest.raises(DamagedSnapshot) as damage:
        read_state(written(tmp_path, data))
    assert why in str(damage.value)


SHAPE_OF_PARTS = {
    "a field the window never had": (
        changed("state.context.window.bogus", 1),
        "state.context.window: unknown bogus",
    ),
    "no calibration": (changed("state.context.calibration", ...), "state.context: no calibration"),
    "a field the state never had": (changed("state.bogus", 1), "state: unknown bogus"),
}


@pytest.mark.parametrize("kind", list(SHAPE_OF_PARTS))
def test_a_part_the_state_cannot_be_read_into_is_damage_too(tmp_path, kind):
    data, why = SHAPE_OF_PARTS[kind]
    saved = read_state(written(tmp_path, data))
    with pytest.raises(DamagedSnapshot) as damage:
        RunState.from_dict(saved.state, ContextConfig())
    assert why in str(damage.value)


@pytest.mark.parametrize(
    "data", [{**whole(), "schema_version": 4}, {"format_version": 4, "seq": 1, "state": {}}]
)
def test_a_state_written_by_a_newer_ouroboros_is_refused(tmp_path, data):
    with pytest.raises(UsageError, match="written by a newer Ouroboros .* upgrade to resume"):
        read_state(written(tmp_path, data))


def test_a_damaged_state_is_rebuilt_from_the_log_saying_why(tmp_path):
    run, log = started_run(tmp_path)
    log.close()
    written(run, changed("state.messages.1.role", "robot"))

    recovered = recover(run, ContextConfig(), "Mission.")

    assert recovered.rebuilt is not None
    assert recovered.rebuilt.startswith("state.json does not hold a run's state")
    assert "state.messages.1.role" in recovered.rebuilt
    assert recovered.state.total_turns == 1  # the reply, from the log


def test_a_state_ahead_of_its_log_is_damage(tmp_path):
    """A power cut kept the state but not the log's last events."""
    run, log = started_run(tmp_path)
    log.close()
    write_state(run, 9, a_state(total_turns=1).to_dict())

    recovered = recover(run, ContextConfig(), "Mission.")

    assert recovered.rebuilt == (
        "state.json is ahead of the log (as of event 9; the log ends at 2)"
    )


def test_a_bug_while_reading_the_state_back_is_raised_not_taken_for_damage(tmp_path):
    """Only a state that does not validate is damage: an error of the code reading it (here
    an observation reader that fails) comes out as itself."""
    run = tmp_path / "run1"
    shutil.copytree(LEGACY, run)
    saved = read_state(run)
    records = [json.loads(line) for line in (run / EVENTS_FILE).read_text().splitlines()]

    def broken(obs_id: str) -> str | None:
        raise TypeError("a bug")

    with pytest.raises(TypeError, match="a bug"):
        upgrade(saved, [r for r in records if r["seq"] > saved.seq], broken)


# -- resuming --


def test_a_call_logged_as_started_but_not_answered_is_answered_as_interrupted(tmp_path):
    """Killed after the `tool_call` event was logged, before its result."""
    run, log = started_run(tmp_path)
    log.emit(ev.ToolCallEvent(**asdict(CALL)))
    log.close()

    recovered = recover(run, ContextConfig())

    assert recovered.rebuilt is None
    assert recovered.interrupted == [CALL]
    assert recovered.state.messages[-1]["role"] == "assistant"  # the runner answers it


def test_a_result_logged_after_the_state_was_written_is_taken_from_the_log(tmp_path):
    """The process died between logging a result and the turn's end writing the state: the
    result is taken from the log and its observation file (the model has not seen it yet,
    so it is capped as the window is now), not reported as interrupted."""
    run, log = started_run(tmp_path)
    ObservationStore(run / OBSERVATIONS_DIR).save("obs-1", "KEY: 1234\n", session=1)
    log.emit(ev.ToolCallEvent(**asdict(CALL)))
    log.emit(
        ev.ToolResultEvent(
            id="c1",
            name="file_read",
            ok=True,
            bytes=10,
            observation="obs-1",
            truncated=False,
            summary="KEY: 1234",
            duration_ms=1,
        )
    )
    log.close()

    recovered = recover(run, ContextConfig())

    assert recovered.rebuilt is None and recovered.interrupted == []
    assert recovered.state.messages[-1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "KEY: 1234\n",
    }
    assert recovered.state.session_successes == 1
    assert recovered.state.context.next_observation == 2  # obs-1 is taken


def test_a_reply_logged_after_the_state_was_written_is_taken_from_the_log(tmp_path):
    """The state as of the run's start; the reply (CALL) was logged, its call never started:
    the reply is replayed, counted, and its call is left to run, not asked for again."""
    run, log = started_run(tmp_path)
    write_state(run, 1, state_at_its_start().to_dict())  # before the reply
    log.close()

    recovered = recover(run, ContextConfig())

    assert recovered.rebuilt is None and recovered.interrupted == []
    assert recovered.state.messages[-2] == {"role": "user", "content": "Go."}
    assert recovered.state.messages[-1] == {
        "role": "assistant",
        "content": "Reading.",
        "tool_calls": [CALL.to_wire()],
    }
    assert pending_calls(recovered.state.messages) == [CALL]
    assert recovered.state.total_turns == 1


TWO_CALLS = [
    ToolCall("c1", "file_read", '{"path": "a.txt"}'),
    ToolCall("c2", "file_read", '{"path": "b.txt"}'),
]


def turn_events() -> list[ev.EventBase]:
    """A turn of two calls as a run logs it, after the state of the turn before."""

    def result(call_id: str, obs_id: str, text: str) -> ev.ToolResultEvent:
        return ev.ToolResultEvent(
            id=call_id,
            name="file_read",
            ok=True,
            bytes=len(text),
            observation=obs_id,
            truncated=False,
            summary=text.strip(),
            duration_ms=1,
        )

    return [
        ev.Assistant(
            text="Both.", finish_reason="tool_calls", tool_calls=list(map(asdict, TWO_CALLS))
        ),
        ev.TokenUsage(
            prompt_tokens=100,
            completion_tokens=10,
            total_tokens=110,
            context_limit=8192,
            budget=7168,
            context_used_pct=1.4,
            source="server",
            reported=100,
        ),
        ev.ToolCallEvent(**asdict(TWO_CALLS[0])),
        result("c1", "obs-1", "A\n"),
        ev.ToolCallEvent(**asdict(TWO_CALLS[1])),
        result("c2", "obs-2", "B\n"),
    ]


@pytest.mark.parametrize("cut", range(len(turn_events()) + 1))
def test_a_kill_anywhere_in_a_turn_resumes_with_everything_it_logged(tmp_path, cut):
    """The state is written at a turn's end; the process is killed after `cut` events of the
    next turn. The resume has the reply and each result logged (their text from the
    observation files), a call started without a result answered as interrupted, a call
    never started left to run, and the turn and its tokens counted once."""
    run, log = run_at_its_start(tmp_path)
    observations = ObservationStore(run / OBSERVATIONS_DIR)
    log.turn = 1
    for event in turn_events()[:cut]:
        if isinstance(event, ev.ToolResultEvent):  # its text is saved before it is logged
            observations.save(event.observation, event.summary + "\n", session=1)
        log.emit(event)
    log.close()

    recovered = recover(run, ContextConfig())

    messages = recovered.state.messages
    answered = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    expected = [("c1", "A\n")] * (cut >= 4) + [("c2", "B\n")] * (cut >= 6)
    assert answered == dict(expected)
    started = {1: 3, 2: 5}  # the events after which each call was started and not answered
    assert [c.id for c in recovered.interrupted] == [
        f"c{n}" for n, at in started.items() if cut == at
    ]
    unanswered = {c.id for c in pending_calls(messages)} - {c.id for c in recovered.interrupted}
    assert unanswered == ({"c1", "c2"} if cut in (1, 2) else {"c2"} if cut in (3, 4) else set())
    assert recovered.state.total_turns == (1 if cut else 0)
    assert recovered.state.tokens_used == (110 if cut >= 2 else 0)
    assert recovered.rebuilt is None


def test_a_reply_never_logged_is_asked_for_again(tmp_path):
    run, log = run_at_its_start(tmp_path)
    log.close()

    recovered = recover(run, ContextConfig())

    assert recovered.state.messages[-1] == {"role": "user", "content": "Go."}
    assert recovered.state.total_turns == 0


def legacy_copy(tmp_path: Path) -> Path:
    run = tmp_path / "run1"  # the run's id is its directory's name
    shutil.copytree(LEGACY, run, ignore=shutil.ignore_patterns("*.md", "recovered.json"))
    return run


def test_a_run_written_before_the_state_was_versioned_resumes_with_the_same_conversation(
    tmp_path,
):
    """tests/data/legacy_run_v1: a snapshot (schema 1) and the checkpoints after it (masking
    and a wind-down among them), killed after a call started; recovered.json is what the
    Ouroboros that wrote it recovered."""
    expected = json.loads((LEGACY / "recovered.json").read_text())
    run = legacy_copy(tmp_path)

    recovered = recover(run, ContextConfig(carryover_turns=3), "You are a test.")

    state = plain(recovered.state.to_dict())
    assert recovered.rebuilt is None
    assert by_position(expected["state"]["messages"]) == {
        key: state[key] for key in ("messages", "tokens", "notes")
    }
    system = expected["state"]["messages"][0]
    assert state["system_marks"] == {
        "mission": system["_mission"],
        "mission_chars": system["_mission_chars"],
        "memory": None,
    }
    counters = [key for key in expected["state"] if key not in ("messages", "context", "digest")]
    assert {key: state[key] for key in counters} == {
        key: expected["state"][key] for key in counters
    }
    added_since = {"redone_before": 0}  # the digest's counts added since, at their start
    assert state["digest"] == {**expected["state"]["digest"], **added_since}
    # the whole context manager, not its observations only: the belief, the calibration, the
    # last count and the counters the old recovery gave (fields added since at their start)
    since = {
        "read_granted": False,
        "counts_taken": 0,
        "probed_at": -DOUBT_EVERY,
        "short_doubted": False,
    }
    context = expected["state"]["context"]
    observations = {  # a write saved before its content was counted: never masked
        call_id: {**obs, "call_cut": 0} for call_id, obs in context["observations"].items()
    }
    assert state["context"] == {**context, **since, "observations": observations}
    assert recovered.seq == expected["seq"]
    assert [[c.id, c.name, c.arguments] for c in recovered.interrupted] == expected["interrupted"]


def by_position(messages: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Messages of schema 1 or 2 as schema 3 holds them: without their `_tokens` and `_note`,
    which are beside them, nor the system prompt's marks (`system_marks`)."""
    return {
        "messages": [
            {k: v for k, v in m.items() if k not in ("_tokens", "_note", *MARK_KEYS)}
            for m in messages
        ],
        "tokens": [m.get("_tokens") for m in messages],
        "notes": [m.get("_note") for m in messages],
    }


def test_a_run_written_before_is_written_back_in_todays_schema(tmp_path):
    run = legacy_copy(tmp_path)
    recovered = recover(run, ContextConfig(carryover_turns=3))

    write_state(run, recovered.seq, recovered.state.to_dict())

    saved = read_state(run)
    assert saved.schema_version == CURRENT_SCHEMA_VERSION
    again = RunState.from_dict(saved.state, ContextConfig(carryover_turns=3))
    assert plain(again.to_dict()) == plain(recovered.state.to_dict())


def test_a_checkpoint_that_keeps_messages_the_snapshot_never_had_is_damage(tmp_path):
    run = legacy_copy(tmp_path)
    lines = (run / EVENTS_FILE).read_text().splitlines()
    records = [json.loads(line) for line in lines]
    last = max(i for i, r in enumerate(records) if r["type"] == "checkpoint" and "messages" in r)
    records[last]["messages"][0] = [0, 999]
    (run / EVENTS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))

    recovered = recover(run, ContextConfig(carryover_turns=3), "You are a test.")

    assert recovered.rebuilt is not None
    assert f"(event {records[last]['seq']}) that keeps messages 0-999" in recovered.rebuilt


def test_the_context_is_saved_as_its_own_to_dict_says(tmp_path):
    """RunState.to_dict saves the context with the observation dicts it keeps made (one per
    observation, made again only when it changes): the same as the context makes afresh."""
    recovered = recover(legacy_copy(tmp_path), ContextConfig(carryover_turns=3))
    context = recovered.state.context
    assert context.observations and context.last_count is not None  # not vacuous

    assert plain(recovered.state.to_dict()["context"]) == plain(context.to_dict())


def test_a_message_is_encoded_once_and_again_whenever_it_changed(tmp_path):
    """The writer keeps each message's JSON while the message stays in its place; a message
    masked, measured, dropped or moved is written as it is now."""
    state = a_state()
    state.messages.add_result("c1", "a long result " * 20)
    writer = StateWriter(tmp_path)
    changes = [
        lambda: None,
        lambda: state.messages.measure(2, 57),  # kept beside the message, not in it
        lambda: state.messages.mask({"c1": "[masked]"}),
        lambda: state.messages.add_note("continue", "Go on."),
        lambda: state.messages.drop(1, 3),  # the note moves to where the reply was
        lambda: state.messages.replace_system({"role": "system", "content": "New mission."}),
    ]

    def redact(text: str) -> str:
        return text.replace("Go on", "[REDACTED]")

    for change in changes:
        change()
        writer.write(7, state.to_dict(), redact)
        messages = json.loads(json.dumps(state.messages.messages).replace("Go on", "[REDACTED]"))
        assert read_state(tmp_path).state == plain({**state.to_dict(), "messages": messages})


def test_each_observation_is_saved_as_it_is_now_through_growth_masking_and_drops():
    """The saved dicts are made once and kept by identity: after a masking round, turns
    dropped from the front, or new results, what is saved is each observation as it is."""
    from dataclasses import asdict

    from ouroboros.loop.state import SavedObservations
    from ouroboros.window.conversation import Observation

    def obs(i: int) -> Observation:
        return Observation(f"obs-{i}", f"c{i}", "file_read", f"f{i}", 10 * i, i, "first")

    registry = {f"c{i}": obs(i) for i in range(5)}
    saved = SavedObservations()
    steps = [
        lambda: None,
        lambda: setattr(registry["c2"], "masked", True),
        lambda: registry.update({"c5": obs(5), "c6": obs(6)}),
        lambda: [registry.pop(key) for key in ("c0", "c1")],  # a dropped turn's
        lambda: setattr(registry["c4"], "masked", True),
        lambda: registry.update({"c7": obs(7)}),
    ]
    for step in steps:
        step()
        assert saved.of(registry) == {key: asdict(o) for key, o in registry.items()}


def test_a_growing_memo_makes_only_what_is_new_or_changed():
    """A write costs what the turn added: an item is made once, again only when its mark
    changes, and everything again only when items left from the front."""
    from ouroboros.store.state_file import GrowingMemo

    made: list[str] = []
    memo = GrowingMemo(lambda key, item: made.append(key) or f"{key}={item}")
    registry = {"a": 1, "b": 2, "c": 3}

    assert memo.update(registry) == ["a=1", "b=2", "c=3"]
    registry["d"] = 4
    registry["b"] = 20
    assert memo.update(registry) == ["a=1", "b=20", "c=3", "d=4"]
    assert made == ["a", "b", "c", "b", "d"]
    assert memo.update(registry, [1, 20, 3, 4]) == ["a=1", "b=20", "c=3", "d=4"]  # marks given
    del registry["a"]
    assert memo.update(registry) == ["b=20", "c=3", "d=4"]
    assert made[-3:] == ["b", "c", "d"]


class CheckedWriter(StateWriter):
    """Writes as StateWriter does, then checks the file against the state encoded whole."""

    writes = 0

    def write(self, seq: int, state: dict[str, Any], redact: Any = None, **how: Any) -> None:
        super().write(seq, state, redact, **how)
        assert read_state(self.path.parent).state == plain(state)
        self.writes += 1


def test_what_a_session_writes_is_its_state_through_masking_and_restarts(tmp_path):
    model = FakeModel()
    rig = Rig(tmp_path, model, limit=3000, carryover_turns=1)
    model.then = reads(rig, 1500)
    writer = rig.services.state_file = CheckedWriter(rig.services.run_dir)

    for _ in range(3):
        assert isinstance(rig.run(), RestartSession)
        rig.restart()

    assert rig.state.context.total_masked > 0 and rig.state.restarts == 3
    assert writer.writes > 20


def test_a_write_that_would_say_the_same_again_leaves_the_file_as_it_is(tmp_path):
    """After a step's write, the turn's end often has nothing new but the seq: the file is
    not written again (the events after its seq are none a resume needs), only synced when
    asked to be durable; the next change is written whole."""
    state = a_state()
    writer = StateWriter(tmp_path)
    writer.write(7, state.to_dict(), durable=False)
    before = (tmp_path / STATE_FILE).stat().st_ino
    writer.write(9, state.to_dict(), durable=True)
    assert (tmp_path / STATE_FILE).stat().st_ino == before
    assert read_state(tmp_path).seq == 7
    state.messages.add_result(CALL.id, "done")
    writer.write(11, state.to_dict(), durable=True)
    saved = read_state(tmp_path)
    assert (saved.seq, saved.state["messages"][-1]["content"]) == (11, "done")
    writer.close()


def test_an_observation_is_written_as_the_redaction_now_says(tmp_path):
    """Each observation's JSON is kept between writes, but not across a change of what is
    redacted: a secret added to the run's secrets leaves the file at the next write."""
    context = ContextManager.create(8192, "config", 1024, ContextConfig())
    state = RunState("run1", [{"role": "system", "content": "Mission."}], context)
    context.add_result(
        state.messages,
        ToolCall("c1", "file_read", '{"path": "key.txt"}'),
        "key.txt",
        ToolResult("token=hunter2\n", meta={}),
    )
    writer = StateWriter(tmp_path)
    writer.write(3, state.to_dict())
    assert "hunter2" in (tmp_path / STATE_FILE).read_text()
    writer.write(4, state.to_dict(), lambda text: text.replace("hunter2", "[REDACTED]"))
    assert "hunter2" not in (tmp_path / STATE_FILE).read_text()


# -- schema 2: the harness's keys in the messages --

V2_STATE = (
    '{"schema_version": 2, "seq": 2, "state": {"run_id": "run1", "messages": ['
    '{"role": "system", "content": "Mission.", "_tokens": 12}, '
    '{"role": "user", "content": "Begin.", "_note": "continue", "_tokens": 9}, '
    '{"role": "assistant", "content": "Reading.", "tool_calls": [{"id": "c1", "type": '
    '"function", "function": {"name": "file_read", "arguments": "{\\"path\\": \\"a.txt\\"}"}}]}], '
    '"context": {"window": {"claimed": 8192, "claimed_source": "config"}, '
    '"max_output_tokens": 1024, "calibration": {"chars": 0.0, "tokens": 0.0, '
    '"dense_chars": 0.0, "dense_tokens": 0.0}, "observations": {}}, '
    '"session_turns": 1, "total_turns": 1}}'
)


def test_a_state_of_schema_2_moves_the_harness_keys_out_of_its_messages(tmp_path):
    """Written by hand as the Ouroboros of schema 2 wrote it: `_tokens` and `_note` in the
    messages. Upgraded, each message is its wire form, its size and note beside it."""
    (tmp_path / STATE_FILE).write_text(V2_STATE)
    saved = read_state(tmp_path)
    assert saved.schema_version == 2

    upgraded = upgrade(saved, [], lambda obs: None)

    assert (upgraded.schema_version, upgraded.seq) == (3, 2)
    state = upgraded.state
    assert state["messages"][:2] == [
        {"role": "system", "content": "Mission."},
        {"role": "user", "content": "Begin."},
    ]
    assert state["tokens"] == [12, 9, None]
    assert state["notes"] == [None, "continue", None]
    assert "_tokens" in saved.state["messages"][0]  # the state read is left as it was


def test_a_run_whose_state_is_of_schema_2_resumes_with_its_sizes_and_notes(tmp_path):
    run, log = started_run(tmp_path)
    log.close()
    (run / STATE_FILE).write_text(V2_STATE)

    recovered = recover(run, ContextConfig())

    assert recovered.rebuilt is None
    messages = recovered.state.messages
    assert messages.notes[:3] == [None, "continue", None]
    assert [messages.measured_at(i) for i in range(3)] == [12, 9, None]
    assert all(not key.startswith("_") for m in messages for key in m)
    assert messages.tally.tokens(3.0) > 12 + 9  # the sizes are the ledger's
    write_state(run, recovered.seq, recovered.state.to_dict())
    assert read_state(run).state["notes"] == [None, "continue", None]


# -- schema 3 as first written: the system prompt's marks in it --

V3_MARKED = (
    '{"schema_version": 3, "seq": 2, "state": {"run_id": "run1", "messages": ['
    '{"role": "system", "content": "Mission.\\n\\n---\\n\\nnotes", "_mission": '
    '"0123456789abcdef", "_mission_chars": 8, "_memory": "NOTES.md"}, '
    '{"role": "user", "content": "Begin."}], "tokens": [12, null], '
    '"notes": [null, "continue"], '
    '"context": {"window": {"claimed": 8192, "claimed_source": "config"}, '
    '"max_output_tokens": 1024, "calibration": {"chars": 0.0, "tokens": 0.0, '
    '"dense_chars": 0.0, "dense_tokens": 0.0}, "observations": {}}}}'
)


def test_a_state_of_schema_3_with_the_marks_in_its_system_prompt_is_written_with_them_apart(
    tmp_path,
):
    """Schema 3 as first written kept the system prompt's marks in it: they are read from
    there, and written beside it."""
    run, log = started_run(tmp_path)
    log.close()
    (run / STATE_FILE).write_text(V3_MARKED)

    recovered = recover(run, ContextConfig())

    assert recovered.rebuilt is None
    state = recovered.state
    assert state.system_marks == SystemMarks("0123456789abcdef", 8, "NOTES.md")
    assert state.messages[0] == {"role": "system", "content": "Mission.\n\n---\n\nnotes"}
    assert state.system_prompt.pinned_memory == "NOTES.md"
    write_state(run, recovered.seq, state.to_dict())
    saved = read_state(run).state
    assert saved["system_marks"] == {
        "mission": "0123456789abcdef",
        "mission_chars": 8,
        "memory": "NOTES.md",
    }
    assert not any(key.startswith("_") for m in saved["messages"] for key in m)
    again = RunState.from_dict(saved, ContextConfig())
    assert again.system_marks == state.system_marks


def test_a_state_whose_system_prompt_has_no_marks_takes_its_whole_text_for_the_mission(tmp_path):
    unmarked = json.loads(V3_MARKED)
    unmarked["state"]["messages"][0] = {"role": "system", "content": "Mission."}
    (tmp_path / STATE_FILE).write_text(json.dumps(unmarked))

    upgraded = upgrade(read_state(tmp_path), [], lambda obs: None)

    assert upgraded.state["system_marks"] is None
    state = RunState.from_dict(upgraded.state, ContextConfig())
    assert state.system_prompt.mission() == (fingerprint("Mission."), len("Mission."))


def test_the_upgrade_moves_the_marks_of_the_system_prompt_beside_it(tmp_path):
    """The system prompt's marks (loop/memory.py) tell an edit of SYSTEM_PROMPT.md from one of
    the memory after a resume: they move out of it, to `system_marks`, as `_tokens` and
    `_note` go from every message."""
    saved = read_state(legacy_copy(tmp_path))
    system = saved.state["messages"][0]
    assert "_mission" in system
    records = [json.loads(line) for line in (tmp_path / "run1" / EVENTS_FILE).open()]

    upgraded = upgrade(saved, records, ObservationStore(tmp_path / "run1" / OBSERVATIONS_DIR).read)

    messages = upgraded.state["messages"]
    assert upgraded.state["system_marks"] == {
        "mission": system["_mission"],
        "mission_chars": system["_mission_chars"],
        "memory": None,
    }
    assert not any(key.startswith("_") for m in messages for key in m)
    assert upgraded.state["notes"][1] == "restart" and upgraded.state["tokens"][0] == 201
    assert "_mission" in saved.state["messages"][0]  # the state read is left as it was
