"""A large state's turn costs what the turn added: state.json is written at a turn's end
while it is small, and once it holds more than WAIT_MIN_BYTES only when what its turns
appended is worth a write (store/state_file.py); a resume brings it forward from the log.
Anything the log cannot bring back (a message replaced, a key it does not replay) is
written at once."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ouroboros.config import ContextConfig, load_config
from ouroboros.demo import write_demo_project
from ouroboros.loop.resume import recover
from ouroboros.loop.runner import run_agent
from ouroboros.loop.state import RunState, save_state
from ouroboros.protocols import RunHooks
from ouroboros.store.log import run_records
from ouroboros.store.state_file import STATE_FILE, WAIT_MIN_BYTES, WAIT_SHARE, StateWriter
from ouroboros.testing import Reply, ScriptedServer
from ouroboros.window.manager import ContextManager
from tests.fakes import MemoryLog

KB = 1024


def a_state(results: int) -> RunState:
    """A run's state whose conversation holds `results` results of about 1 KB."""
    context = ContextManager.create(1_000_000, "config", 1024, ContextConfig())
    state = RunState("run1", [{"role": "system", "content": "Mission."}], context)
    turn(state, results)
    return state


def turn(state: RunState, results: int = 1) -> None:
    """Turns as the log replays them: a result appended, the counters on."""
    for _ in range(results):
        n = len(state.messages)
        state.messages.add_result(f"c{n}", f"{n} " + "x" * KB)
        state.total_turns += 1
        state.tokens_used += 300


def turn_end(state: RunState, log: MemoryLog, writer: StateWriter) -> int:
    """A turn's end: the seq of the state on disk after it."""
    log.seq += 3
    save_state(state, log, writer, durable=True, turn_end=True)
    return on_disk(writer.path.parent)["seq"]


def on_disk(run: Path) -> dict[str, Any]:
    return json.loads((run / STATE_FILE).read_text())


def test_a_large_state_that_only_grew_is_written_once_its_growth_is_worth_it(tmp_path):
    state, log, writer = a_state(WAIT_MIN_BYTES // KB + 10), MemoryLog(seq=1), StateWriter(tmp_path)
    first = turn_end(state, log, writer)
    size = (tmp_path / STATE_FILE).stat().st_size

    for waited in range(WAIT_MIN_BYTES // KB):  # far more turns than a wait may take
        turn(state)
        if turn_end(state, log, writer) != first:
            break
    else:
        pytest.fail("the state was never written again")

    # it waited while the turns added less than 1/WAIT_SHARE of the file (each ~1 KB)
    share = size / WAIT_SHARE
    assert share / (KB + 64) - 1 <= waited <= share / KB
    assert on_disk(tmp_path)["seq"] == log.seq
    assert on_disk(tmp_path)["state"]["total_turns"] == state.total_turns


def test_what_the_log_cannot_bring_back_is_written_at_once(tmp_path):
    changes = {
        "a result masked": lambda s: s.messages.replace_at(3, {**s.messages[3], "content": "-"}),
        "turns dropped": lambda s: s.messages.drop(1, 3),
        "a restart counted": lambda s: setattr(s, "restarts", 1),
        "a warning given": lambda s: s.warned.append("brief_tools"),
        "the window believed smaller": lambda s: s.context.refused(500_000, 400_000),
    }
    for what, change in changes.items():
        run = tmp_path / what.replace(" ", "_")
        run.mkdir()
        state, log, writer = a_state(WAIT_MIN_BYTES // KB + 10), MemoryLog(seq=1), StateWriter(run)
        first = turn_end(state, log, writer)
        turn(state)
        assert turn_end(state, log, writer) == first  # it waits
        change(state)
        assert turn_end(state, log, writer) == log.seq, what
        # and a write that is not a turn's end never waits
        turn(state)
        save_state(state, log, writer, durable=True)
        assert on_disk(run)["state"]["total_turns"] == state.total_turns


def test_a_small_state_is_written_at_every_turns_end(tmp_path):
    state, log, writer = a_state(10), MemoryLog(seq=1), StateWriter(tmp_path)
    for _ in range(5):
        turn(state)
        assert turn_end(state, log, writer) == log.seq


def test_a_kill_at_any_turn_of_a_large_window_resumes_with_every_turn_logged(tmp_path):
    """A window so large nothing is masked: the state passes WAIT_MIN_BYTES and turns leave
    its write to later ones. A copy of the run directory taken as each turn begins is what a
    kill there leaves: each resumes from its state.json (no rebuild) with every turn its log
    holds, as the finished run has them; and some states were turns behind their log (the
    wait was real)."""
    reads = 48  # of 9 KB each: the state passes WAIT_MIN_BYTES about half way
    script = [
        Reply(f"Reading {i}.", [("file_read", {"path": f"big/{i}.txt"})]) for i in range(reads)
    ]
    script.append(Reply("Done.", [("task_complete", {"summary": "all read"})]))
    kills = tmp_path / "kills"

    def copy_at_a_turn(event: Any) -> None:
        if event.type == "assistant":
            (run,) = (tmp_path / ".ouroboros" / "runs").iterdir()
            shutil.copytree(run, kills / f"{event.turn:03d}" / run.name)

    with ScriptedServer(script, model="scripted-demo", context_length=1_000_000) as server:
        write_demo_project(tmp_path, server.base_url, 1)
        (tmp_path / "workspace" / "big").mkdir()
        for i in range(reads):
            (tmp_path / "workspace" / "big" / f"{i}.txt").write_text(f"file {i}\n" + "y" * 9 * KB)
        flags = {"safety.sandbox": "off", "model.context_limit": 1_000_000}
        loaded = load_config(tmp_path / "ouroboros.toml", flags, env={}, user_file=None)
        assert asyncio.run(run_agent(loaded, RunHooks(on_event=copy_at_a_turn))) == 0

    (run,) = (tmp_path / ".ouroboros" / "runs").iterdir()
    final = recover(run, ContextConfig()).state.messages.messages
    behind = 0
    for kill in sorted(kills.iterdir()):
        (copy,) = kill.iterdir()
        logged = sum(e["type"] == "assistant" for e in run_records(copy))
        recovered = recover(copy, ContextConfig())
        assert recovered.rebuilt is None
        messages = recovered.state.messages.messages
        assert messages == final[: len(messages)]
        assert recovered.state.total_turns == logged
        assert sum(m["role"] == "assistant" for m in messages) == logged
        behind += on_disk(copy)["state"]["total_turns"] < logged - 1
    assert behind >= 10
