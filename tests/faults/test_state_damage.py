"""A run's files damaged between a stop and `ouroboros resume`: state.json truncated, empty,
binary, missing or not a run's state; the log with a torn last line or damaged in the middle;
a read-only state dir. Never a traceback: a damaged snapshot is rebuilt from the log (the
source of truth) and the resumed run finishes the task; a log that cannot be read is one line
naming the file and the byte.

One genuine run (the demo agent against the scripted server, stopped by a permanent server
error after a few turns) is made once; each case damages a copy of it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Iterator

import pytest

from ouroboros.config import ContextConfig
from ouroboros.errors import StateError
from ouroboros.loop.rebuild import rebuild_state
from ouroboros.loop.resume import observation_reader
from ouroboros.store.log import EVENTS_FILE, read_events
from ouroboros.store.state_file import STATE_FILE
from ouroboros.testing import Fault, ScriptedServer
from tests.crash_helpers import CountingAgent, check_conversation, demo_project
from tests.helpers import of_type, ouroboros_here, parts_recorded, run_dir

PARTS = 3
MAX_TURNS = 12  # the task takes 2 + 2 * PARTS turns
STOP_AT = 6  # the model call after which the server refuses (401): the run stops, resumable


@pytest.fixture(scope="module")
def genuine(tmp_path_factory) -> Iterator[tuple[Path, str]]:
    """A project whose run stopped after some turns of work: (its directory, the results.txt
    the task must end with). Its server stays up for the resumes."""
    agent = CountingAgent(PARTS, inject_at={STOP_AT: [Fault("status", 401, "unauthorized")]})
    with ScriptedServer(agent) as server:
        agent.server = server
        root = tmp_path_factory.mktemp("genuine")
        _, expected = demo_project(root, server.base_url, PARTS, max_turns=MAX_TURNS)
        result = ouroboros_all([("run", root)])[0]
        assert result.returncode == 2, result.stderr
        assert run_dir(root).joinpath(STATE_FILE).is_file()
        yield root, expected


def ouroboros_all(commands: list[tuple[str, Path]]) -> list[subprocess.CompletedProcess[str]]:
    """`ouroboros COMMAND --config ROOT/ouroboros.toml` for each, one after another, in this
    process (tests.helpers.ouroboros_here)."""
    done = []
    for command, root in commands:
        extra = ["--headless"] if command in ("run", "resume") else []
        done.append(ouroboros_here(command, "--config", str(root / "ouroboros.toml"), *extra))
    return done


def copy_of(genuine: tuple[Path, str], tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    shutil.copytree(genuine[0], root, symlinks=True)
    return root


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def torn_log_and_no_snapshot(run: Path) -> None:
    (run / STATE_FILE).unlink()
    with (run / EVENTS_FILE).open("a") as f:
        f.write('{"type": "assistant", "ts": "2026-01-01T00:00:00.000Z", "seq": 99, "te')


Damage = Callable[[Path], None]
SNAPSHOT_DAMAGE: dict[str, Damage] = {
    "truncated": lambda run: truncate(run / STATE_FILE),
    "empty": lambda run: (run / STATE_FILE).write_bytes(b""),
    "binary": lambda run: (run / STATE_FILE).write_bytes(bytes(range(256)) * 8),
    "missing": lambda run: (run / STATE_FILE).unlink(),
    "not a run's state": lambda run: (run / STATE_FILE).write_text('{"seq": "x"}'),
    "wrong fields": lambda run: (run / STATE_FILE).write_text(
        '{"format_version": 1, "seq": 3, "state": {"run_id": "x", "bogus": 1}}'
    ),
    "torn log, no snapshot": torn_log_and_no_snapshot,
    "no snapshot, no observations": lambda run: (
        (run / STATE_FILE).unlink(),
        shutil.rmtree(run / "observations"),
    ),
}


def test_a_damaged_snapshot_is_rebuilt_from_the_log_and_the_run_finishes(genuine, tmp_path):
    roots = {}
    for name, damage in SNAPSHOT_DAMAGE.items():
        roots[name] = copy_of(genuine, tmp_path, name.replace(" ", "_").replace("'", ""))
        damage(run_dir(roots[name]))
    before = {name: read_events(run_dir(root) / EVENTS_FILE).events for name, root in roots.items()}

    results = ouroboros_all([("resume", root) for root in roots.values()])

    failures = []
    for (name, root), result in zip(roots.items(), results):
        output = result.stdout + result.stderr
        if "Traceback" in output or result.returncode != 0:
            failures.append(f"{name}: exit {result.returncode}: {output[-600:]}")
            continue
        if (root / "workspace" / "results.txt").read_text() != genuine[1]:
            failures.append(f"{name}: results.txt is {parts_recorded(root)}")
        events = read_events(run_dir(root) / EVENTS_FILE).events
        if events[: len(before[name])] != before[name]:
            failures.append(f"{name}: the log before the resume changed")
        warnings = [e["message"] for e in of_type(events, "warning")]
        if not any("rebuilt from events.jsonl" in w for w in warnings):
            failures.append(f"{name}: no warning says the state was rebuilt: {warnings}")
        state = json.loads((run_dir(root) / STATE_FILE).read_text())["state"]
        check_conversation(state["messages"])
    assert not failures, "\n".join(failures)


def test_the_rebuilt_conversation_is_the_one_the_snapshot_held(genuine):
    """Rebuilt from the log alone, a session's conversation is what was sent to the model."""
    run = run_dir(genuine[0])
    events = read_events(run / EVENTS_FILE).events
    saved = json.loads((run / STATE_FILE).read_text())
    prompt = saved["state"]["messages"][0]["content"]

    state, seq = rebuild_state(events, run.name, ContextConfig(), prompt, observation_reader(run))

    assert state.messages == saved["state"]["messages"]
    assert state.messages.notes[:] == saved["state"]["notes"]
    assert (state.session, state.session_turns, state.total_turns, state.restarts) == (
        1,
        saved["state"]["session_turns"],
        saved["state"]["total_turns"],
        0,
    )
    assert state.context.next_observation == saved["state"]["context"]["next_observation"]
    assert seq == max(e["seq"] for e in events if e["type"] in ("assistant", "tool_result"))


def damage_log_middle(run: Path) -> int:
    """Overwrite the 5th line of the log with garbage; return the byte it starts at."""
    data = (run / EVENTS_FILE).read_bytes()
    lines = data.split(b"\n")
    offset = sum(len(line) + 1 for line in lines[:4])
    lines[4] = b"\x00\xff garbage \x81" + lines[4][12:]
    (run / EVENTS_FILE).write_bytes(b"\n".join(lines))
    return offset


def test_a_log_damaged_in_the_middle_is_one_line_naming_the_file_and_the_byte(genuine, tmp_path):
    root = copy_of(genuine, tmp_path, "damaged")
    offset = damage_log_middle(run_dir(root))
    log = run_dir(root) / EVENTS_FILE
    data = log.read_bytes()

    results = ouroboros_all(
        [(command, root) for command in ("resume", "status", "runs", "stats", "logs")]
    )

    for result in results:
        assert "Traceback" not in result.stdout + result.stderr, result.stderr
        assert result.returncode == 1, (result.args, result.stderr)
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
        assert str(log) in result.stderr and f"byte {offset}" in result.stderr
    assert log.read_bytes() == data  # nothing was written to a log that cannot be read


def test_reading_a_log_names_the_byte_where_it_is_damaged(tmp_path):
    log = tmp_path / EVENTS_FILE
    first = b'{"type": "run_start", "seq": 1}\n'
    log.write_bytes(first + b'{"type": "warning", "se\n' + b'{"type": "run_end", "seq": 3}\n')

    with pytest.raises(StateError) as raised:
        read_events(log)

    assert raised.value.message.startswith(f"{log} is damaged at byte {len(first)} (line 2 ")


@pytest.mark.parametrize(
    "last", [b'{"type": "assistant", "se', b"[1, 2]\n", b'{"seq": 2}\n', b"\xff\xfe\n"]
)
def test_a_bad_last_line_is_torn_not_damage(tmp_path, last):
    log = tmp_path / EVENTS_FILE
    first = b'{"type": "run_start", "seq": 1}\n'
    log.write_bytes(first + last)

    contents = read_events(log)

    assert [e["seq"] for e in contents.events] == [1]
    assert contents.torn_line is not None and contents.valid_bytes == len(first)


def test_a_rebuild_after_a_restart_opens_with_the_restart_note_and_keeps_the_last_answer():
    """Session 2 of a run: its turns only, the restart marker first; a reply logged twice
    (asked again after a crash) counts once, the later one kept; a wind-down is told again."""

    def event(seq: int, type: str, session: int, turn: int, **fields) -> dict:
        return {"type": type, "seq": seq, "session": session, "turn": turn, **fields}

    call = {"id": "c1", "name": "file_read", "arguments": '{"path": "a.txt"}'}
    window = {"context_limit": 4096, "limit_source": "config", "budget": 3584}
    events = [
        event(
            1,
            "run_start",
            1,
            0,
            run_id="r1",
            version="0.1.0",
            pid=1,
            config={"agent": {"continue_message": "Go on."}},
        ),
        event(2, "session_start", 1, 0, **window, carryover_messages=0),
        event(3, "assistant", 1, 1, text="Reading.", finish_reason="tool_calls", tool_calls=[call]),
        event(4, "tool_call", 1, 1, **call),
        event(
            5,
            "tool_result",
            1,
            1,
            id="c1",
            name="file_read",
            ok=True,
            bytes=2,
            observation="obs-1",
            truncated=False,
            summary="A",
            duration_ms=1,
        ),
        event(
            6,
            "session_restart",
            2,
            0,
            previous_turns=1,
            carryover_messages=2,
            reason="context full",
        ),
        event(7, "session_start", 2, 0, **window, carryover_messages=2),
        event(8, "assistant", 2, 1, text="Thinking.", finish_reason="stop", tool_calls=[]),
        event(9, "wind_down", 2, 1, context_used_pct=91.0),
        event(10, "assistant", 2, 2, text="First try.", finish_reason="stop", tool_calls=[]),
        event(
            11,
            "assistant",
            2,
            2,
            text="<think>hm</think>Second try.",
            finish_reason="stop",
            tool_calls=[],
        ),
    ]

    state, seq = rebuild_state(events, "r1", ContextConfig(), "Mission.", lambda obs: "A\n")

    assert [(m["role"], m["content"][:30]) for m in state.messages] == [
        ("system", "Mission."),
        ("user", "[Session 2 of this run begins "),
        ("assistant", "Thinking."),
        ("user", "Go on."),
        ("user", "[Context nearly full: 91% of t"),
        ("assistant", "Second try."),
        ("user", "Go on."),
    ]
    assert (state.session, state.session_turns, state.total_turns, state.restarts) == (2, 2, 3, 1)
    assert state.context.next_observation == 2 and state.context.wound_down
    assert (state.context.limit, seq) == (4096, 11)
