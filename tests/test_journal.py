"""Between snapshots the state lives in the log: after every step a `checkpoint` event holds
what changed, and state.json is written only at session boundaries, at the end and now and
then. The state a resume builds from state.json and the checkpoints after it is the live
state, at every step of a real run that masks, winds down and restarts."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from ouroboros.config import ContextConfig, load_config
from ouroboros.loop.journal import Journal, apply_delta, replay
from ouroboros.loop.resume import DIGESTED, fold, observation_reader
from ouroboros.loop.runner import Runner
from ouroboros.loop.state import RunState
from ouroboros.protocols import RunHooks
from ouroboros.server.client import ChatClient
from ouroboros.server.tokenizer import TokenCounter
from ouroboros.store import events as ev
from ouroboros.store.log import EVENTS_FILE, read_events, read_snapshot
from ouroboros.window.policy import ContextManager
from tests.crash_helpers import CountingAgent, demo_project
from tests.helpers import of_type

# Big parts in a small window: masking, a wind-down and a restart within 60 turns.
BIG = {"chars_per_part": 6000, "model": {"context_limit": 4096}, "context": {"carryover_turns": 3}}


def run_in_process(root: Path, base_url: str, on_step: Any, **tables: Any) -> Path:
    """The demo task run in this process, `on_step(runner, event)` told of every event."""
    config, _ = demo_project(root, base_url, 8, max_turns=60, **{**BIG, **tables})
    loaded = load_config(config, env={}, user_file=None)
    run_dir = loaded.state_dir / "runs" / "run1"
    holder: dict[str, Runner] = {}
    hooks = RunHooks(on_event=lambda e: on_step(holder.get("runner"), e))

    async def go() -> int:
        model = loaded.config.model
        client = ChatClient(model.base_url, model.name)
        try:
            holder["runner"] = await Runner.open(
                loaded,
                run_dir,
                client,
                TokenCounter(model.base_url, model.name, http=client.http),
                hooks,
                resume=False,
            )
            return await holder["runner"].run()
        finally:
            await client.aclose()

    assert asyncio.run(go()) in (0, 3)  # done, or paused at max_turns (ouroboros.errors)
    return run_dir


def saved(run_dir: Path, policy: Any) -> dict[str, Any]:
    """What a resume starts from: state.json with the checkpoints after it applied."""
    snapshot, events = read_snapshot(run_dir), read_events(run_dir / EVENTS_FILE).events
    state, _ = replay(snapshot, events, observation_reader(run_dir))
    run_state = RunState.from_dict(state, policy)
    fold(
        run_state.digest,
        [ev.parse_event(e) for e in events if e["seq"] > snapshot["seq"] and e["type"] in DIGESTED],
    )
    return json.loads(json.dumps(run_state.to_dict()))


@pytest.mark.parametrize("durability", ["turn", "event"])
def test_the_state_saved_at_every_step_is_the_live_state(tmp_path, scripted_server, durability):
    server = scripted_server(CountingAgent(8), context_length=4096)
    compared: list[str] = []

    def on_step(runner: Runner | None, event: ev.EventBase) -> None:
        if (
            runner is None
            or event.type not in ("checkpoint", "session_restart")
            and getattr(event, "checkpoint", None) is None
        ):
            return
        live = json.loads(json.dumps(runner.state.to_dict()))
        assert saved(runner.run_dir, runner.loaded.config.context) == live, event
        compared.append(event.type)

    run_dir = run_in_process(tmp_path, server.base_url, on_step, logging={"durability": durability})

    events = read_events(run_dir / EVENTS_FILE).events
    assert of_type(events, "context_mask") and of_type(events, "wind_down")
    assert compared.count("session_restart") >= 1 and len(compared) > 25
    # tool results masked and token counts written on earlier messages, in checkpoints
    checkpoints = [
        e.get("checkpoint", e) for e in events if e["type"] == "checkpoint" or "checkpoint" in e
    ]
    assert any(
        op.get("obs") for e in checkpoints for op in e.get("messages", []) if isinstance(op, dict)
    )  # a tool result logged as its observation
    assert any("tokens" in e for e in checkpoints)
    assert any(
        len([op for op in e.get("messages", []) if isinstance(op, list)]) > 1
        or any(
            isinstance(op, dict) and "masked" in op.get("content", "")
            for op in e.get("messages", [])
        )
        for e in checkpoints
    )
    # state.json was written at the boundaries only: its last write is the run's end
    assert read_snapshot(run_dir)["seq"] == events[-1]["seq"]


def test_a_step_writes_what_it_changed_not_the_conversation(tmp_path, scripted_server):
    """Each checkpoint holds the step's new messages and counters: late in a long session it
    is no bigger than early on, while the conversation it adds to keeps growing."""
    server = scripted_server(CountingAgent(12))
    sizes: list[tuple[int, int]] = []  # (messages in the conversation, bytes of checkpoint)

    def on_step(runner: Runner | None, event: ev.EventBase) -> None:
        if isinstance(event, ev.Checkpoint) and runner is not None and event.messages is not None:
            sizes.append((len(runner.state.messages), len(event.to_json())))

    # The agent reads parts past the 4 there are, over and over: the stuck-loop guard is off
    # so the session grows long.
    run_in_process(
        tmp_path,
        server.base_url,
        on_step,
        chars_per_part=300,
        model={"context_limit": 65536},
        agent={"stuck_repeats": 0},
    )

    early = [size for messages, size in sizes if messages < 15]
    late = [size for messages, size in sizes if messages > 45]
    assert early and late
    assert max(late) < 1.5 * max(early)


def test_masking_and_dropped_turns_are_logged_as_kept_ranges():
    """The pure part: a conversation changed other than by appending is described as the
    ranges of the old one it keeps, and the messages that replace the rest."""
    context = ContextManager.create(8192, "test", 512, ContextConfig())
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "a"},
        {"role": "tool", "tool_call_id": "c", "content": "long " * 50},
    ]
    state = RunState("r", messages, context)
    journal = Journal()
    journal.reset(state, 7)
    before = json.loads(json.dumps(state.to_dict()))
    masked = {"role": "tool", "tool_call_id": "c", "content": "[masked]"}
    state.messages.mask({"c": "[masked]"})
    state.messages.append({"role": "user", "content": "more"})
    state.messages.measure(2, 9)
    state.total_turns = 3

    delta = journal.delta(state)

    assert delta["messages"] == [[0, 3], masked, {"role": "user", "content": "more"}]
    assert delta["tokens"] == [[2, 9]]
    assert delta["state"] == {"total_turns": 3}
    apply_delta(before, json.loads(json.dumps(delta)))
    assert before == json.loads(json.dumps(state.to_dict()))
    assert journal.delta(state) is None
