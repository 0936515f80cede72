"""One session, driven directly: how it stops (idle, max_turns, task_complete, a stop asked
for, a stop signal in any wait), how it writes its state, and how a resumed one picks up.
See tests/session_rig.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from ouroboros.loop.endings import StopRun
from ouroboros.loop.session import Session
from ouroboros.protocols import Interrupted
from ouroboros.store.state_file import read_state
from tests.fakes import FakeModel, Hang, call, reply
from tests.session_rig import CONTINUE, Rig, ended, reads

# --- how a run stops ------------------------------------------------------------------------


def test_turns_without_a_tool_call_pause_the_run_as_idle(tmp_path):
    model = FakeModel(then=lambda sent: reply(""))
    rig = Rig(tmp_path, model, max_idle_turns=2)

    end = rig.run()

    assert isinstance(end, StopRun) and end.reason == "idle"
    assert len(model.requests) == 2
    assert model.requests[1][-1] == {"role": "user", "content": CONTINUE}
    assert not rig.log.of_type("idle")  # the first idle turn gets the message at once


def test_the_run_stops_after_max_turns(tmp_path):
    model = FakeModel()
    rig = Rig(tmp_path, model, max_turns=2)
    model.then = reads(rig, 10)

    end = rig.run()

    assert isinstance(end, StopRun) and end.reason == "max_turns"
    assert len(model.requests) == 2 and rig.state.total_turns == 2
    assert rig.log.types.count("tool_result") == 2


def test_task_complete_ends_the_run_once_all_the_turns_calls_ran(tmp_path):
    model = FakeModel(
        [
            reply(
                "",
                call("file_write", path="a.txt", content="A"),
                call("task_complete", summary="wrote a and b"),
                call("file_write", path="b.txt", content="B"),
            )
        ]
    )
    rig = Rig(tmp_path, model)

    end = rig.run()

    assert isinstance(end, StopRun) and end.reason == "task_complete"
    assert end.summary == "wrote a and b"
    assert (rig.workspace / "a.txt").read_text() == "A"
    assert (rig.workspace / "b.txt").read_text() == "B"
    assert len(model.requests) == 1


def test_a_stop_asked_for_during_a_turn_ends_the_run_after_it(tmp_path):
    rig = Rig(tmp_path, FakeModel())

    def asks_to_stop(sent: list[dict[str, Any]]) -> Any:
        rig.services.stop.request("interrupted")
        return reply("", call("file_write", path="a.txt", content="A"))

    rig.model.script.append(asks_to_stop)
    end = rig.run()

    assert isinstance(end, StopRun) and end.reason == "interrupted"
    assert (rig.workspace / "a.txt").read_text() == "A"
    assert len(rig.model.requests) == 1 and rig.state.messages[-1]["role"] == "tool"


def stopped(rig: Rig, when: Any) -> BaseException:
    """Run a session as the runner does, a stop signal sent once `when()` is done."""
    stop = rig.services.stop
    heard: list[str] = []
    stop.listeners.append(heard.append)

    async def go() -> None:
        async def signal() -> None:
            await when()
            stop.signal("SIGTERM")

        signaller = asyncio.create_task(signal())
        try:
            await stop.cancellable(Session(rig.state, rig.services).run())
        finally:
            signaller.cancel()

    end = ended(go())
    assert heard == ["SIGTERM"]
    return end


def test_a_stop_signal_ends_a_wait_for_the_model_at_once(tmp_path):
    model = FakeModel()
    rig = Rig(tmp_path, model)
    model.script.extend([reads(rig, 10), Hang()])

    end = stopped(rig, model.waiting.wait)

    assert isinstance(end, Interrupted) and end.reason == "interrupted"
    assert len(model.requests) == 2 and rig.state.total_turns == 1
    assert rig.state.messages[-1]["role"] == "tool"  # the first turn whole, nothing after


def test_a_stop_signal_kills_a_tool_call_and_answers_it(tmp_path):
    model = FakeModel([reply("", call("wait"))])
    rig = Rig(tmp_path, model)

    end = stopped(rig, rig.waits.started.wait)

    assert isinstance(end, Interrupted)
    answer = rig.state.messages[-1]
    assert answer["role"] == "tool" and "interrupted" in answer["content"]
    [result] = rig.log.of_type("tool_result")
    assert result.interrupted and not result.ok and result.summary == "interrupted"


def test_a_stop_signal_ends_an_idle_pause(tmp_path):
    model = FakeModel(then=lambda sent: reply(""))
    rig = Rig(tmp_path, model, max_idle_turns=5)

    async def pausing() -> None:
        while not rig.log.of_type("idle"):
            await asyncio.sleep(0.001)

    end = stopped(rig, pausing)

    assert isinstance(end, Interrupted)
    [idle] = rig.log.of_type("idle")
    assert idle.idle_turns == 2 and idle.pause_secs == 2.0 and idle.max_idle_turns == 5
    assert len(model.requests) == 2


def test_the_state_is_written_whole_as_of_the_last_event_at_every_turn(tmp_path):
    """Whenever the model is asked, state.json holds the live state, as of the last event
    logged; each turn's end made the log durable first."""
    model = FakeModel()
    rig = Rig(tmp_path, model, max_turns=6)
    read = reads(rig, 10)
    turns: list[int] = []

    def then(sent: list[dict[str, Any]]) -> Any:
        saved = read_state(rig.services.run_dir)
        if saved is not None:
            assert saved.seq == rig.log.seq
            assert saved.state == json.loads(json.dumps(rig.state.to_dict()))
            turns.append(saved.state["total_turns"])
        return read(sent)

    model.then = then
    order: list[tuple[str, int]] = []  # what was made durable, in order, and as of which seq
    commit, write = rig.log.commit, rig.services.state_file.write

    def committing() -> None:
        commit()
        order.append(("log", rig.log.seq))

    def writing(seq: int, state: Any, redact: Any = None, *, durable: bool = True, **rest) -> None:
        write(seq, state, redact, durable=durable, **rest)
        if durable:
            order.append(("state", seq))

    rig.log.commit, rig.services.state_file.write = committing, writing  # type: ignore
    rig.run()

    assert turns == [1, 2, 3, 4, 5]
    assert rig.log.commits == 6
    # a durable state never names an event the durable log does not have
    assert [what for what, _ in order].count("state") == 6  # one a turn's end, one the end
    for at, (what, seq) in enumerate(order):
        if what == "state":
            assert at > 0 and order[at - 1] == ("log", seq), order
    saved = read_state(rig.services.run_dir)
    assert saved.state["total_turns"] == 6 and saved.seq == rig.log.seq
    assert "checkpoint" not in rig.log.types  # what changed is no longer logged
    assert all(result.checkpoint is None for result in rig.log.of_type("tool_result"))


# --- picking a run up -----------------------------------------------------------------------


def test_a_resumed_session_runs_the_calls_never_started_then_gives_the_instruction(tmp_path):
    model = FakeModel([reply("", call("task_complete", summary="b written"))])
    rig = Rig(tmp_path, model)
    write = call("file_write", path="b.txt", content="B")
    rig.state.messages.append({"role": "assistant", "content": "", "tool_calls": [write.to_wire()]})
    rig.state.instruction = "Now check b.txt."

    end = rig.run()

    assert isinstance(end, StopRun) and end.reason == "task_complete"
    assert (rig.workspace / "b.txt").read_text() == "B"
    sent = model.requests[0]
    assert sent[-2]["role"] == "tool" and sent[-2]["tool_call_id"] == write.id
    assert sent[-1] == {"role": "user", "content": "Now check b.txt."}
    assert rig.state.instruction == ""


def test_a_reply_without_calls_before_a_stop_gets_the_continue_message_on_resume(tmp_path):
    model = FakeModel([reply("", call("task_complete", summary="ok"))])
    rig = Rig(tmp_path, model)
    rig.state.messages.append({"role": "assistant", "content": "Thinking."})

    rig.run()

    assert model.requests[0][-1] == {"role": "user", "content": CONTINUE}


def test_only_turns_without_a_tool_call_in_a_row_count_as_idle(tmp_path):
    model = FakeModel(
        [reply("Hm."), reply("", call("file_write", path="a.txt", content="A")), reply("Hm.")]
    )
    rig = Rig(tmp_path, model, max_turns=3, max_idle_turns=2)

    end = rig.run()

    assert isinstance(end, StopRun) and end.reason == "max_turns"
