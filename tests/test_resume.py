"""`ouroboros resume` after `kill -9`: a real process killed during a tool, while waiting for
the model, and at moments chosen by seed; then resumed to finish the demo task with every
completed turn kept and no command run twice (except the one reported as interrupted)."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
from pathlib import Path

import pytest

from ouroboros.store.log import list_runs, read_events
from tests.crash_helpers import (
    CountingAgent,
    check_conversation,
    check_log,
    demo_project,
    event_lines,
    executions,
    kill,
    kill_held_tool,
    sent_from,
    snapshot,
    start_forked,
    tool_messages,
    wait_for,
)
from tests.helpers import of_type, ouroboros_here, run_events

PARTS = 4
MAX_TURNS = 16  # a limit past the task: 2 + 2 * PARTS turns, then the agent calls task_complete
TASK_TURNS = 3 + 2 * PARTS
BIG_PARTS = {
    "max_turns": 40,
    "chars_per_part": 6000,
    "model": {"context_limit": 4096},
    "context": {"carryover_turns": 3},
}  # masks, winds down and restarts


def crash_and_resume(
    tmp_path: Path,
    server,
    agent: CountingAgent,
    kill_when,
    *,
    max_turns: int = MAX_TURNS,
    parts: int = PARTS,
    **project,
):
    """Run, kill -9 when `kill_when()` is true, resume to the end. Returns what the checks
    need: the state saved at the kill, the index of the first request after it, the resume's
    result and the final state. The run is a process forked from the test's (a real
    process to kill -9, without an interpreter to start); the resume runs in the test's."""
    config, expected = demo_project(
        tmp_path, server.base_url, parts, max_turns=max_turns, **project
    )
    process = start_forked("run", "--config", str(config), "--headless", root=tmp_path)
    try:
        wait_for(kill_when, "the kill point", process)
        kill(process)
    finally:
        kill(process)
        kill_held_tool(tmp_path)
    assert process.returncode == -9
    before = snapshot(tmp_path)
    first_after = len(server.requests)
    result = ouroboros_here("resume", "--config", str(config), "--headless")
    assert result.returncode == 0, result.stderr + result.stdout
    assert len(list_runs(tmp_path / ".ouroboros")) == 1  # the same run, continued
    assert (tmp_path / "workspace" / "results.txt").read_text() == expected
    after = snapshot(tmp_path)
    # counted across the kill: each turn with a reply logged, before and after it
    assert after["state"]["total_turns"] == turns_of(run_events(tmp_path))
    assert "run ended: task_complete" in result.stdout
    check_conversation(after["state"]["messages"])
    return before, first_after, result, after


def check_resumed_from(before: dict, events: list[dict]) -> dict:
    """The resumed run starts where the log left it: the state as of the last turn's end
    (same session, restarts), brought forward by the reply the kill came after, if one was
    logged since (the state is written at a turn's end, the turn is replayed from the
    log), so every reply logged counts once."""
    resumed = of_type(events, "run_resumed")
    assert len(resumed) == 1
    state = before["state"]
    logged = turns_of([e for e in events if e["seq"] < resumed[0]["seq"]])
    assert resumed[0]["total_turns"] == logged
    assert state["total_turns"] <= logged <= state["total_turns"] + 1
    assert resumed[0]["restarts"] == state["restarts"]
    assert resumed[0]["session"] == state["session"]
    return resumed[0]


def turns_of(events: list[dict]) -> int:
    """The turns the events hold replies of, each (session, turn) once."""
    return len({(e["session"], e["turn"]) for e in of_type(events, "assistant")})


def kept_every_turn(before: dict, server, first_after: int) -> None:
    """What the model sees after the resume starts with the conversation as saved."""
    saved = before["state"]["messages"]
    sent = sent_from(server, first_after)
    assert any(m[: len(saved)] == saved for m in sent), "the saved conversation was not kept"


def test_kill_during_a_tool_reports_it_interrupted_and_runs_it_no_more(tmp_path, scripted_server):
    agent = CountingAgent(PARTS, hold_tool_at=2)
    server = scripted_server(agent)
    before, first_after, result, after = crash_and_resume(
        tmp_path, server, agent, lambda: (tmp_path / "held_tool").exists()
    )

    events = check_log(tmp_path)
    resumed = check_resumed_from(before, events)
    assert resumed["interrupted_tools"] == ["shell_exec"]
    assert "interrupted tool calls: shell_exec" in result.stdout
    # The held command started once and never again; its redo is a new command.
    runs = executions(tmp_path)
    assert set(runs.values()) == {1}
    assert "T2" in runs and len(runs) == PARTS + 1
    # The model was told, in the call's own result, that it may or may not have happened.
    interrupted = [
        m
        for sent in sent_from(server, first_after)
        for m in tool_messages(sent)
        if "[interrupted" in m["content"]
    ]
    assert interrupted and "may or may" in interrupted[0]["content"]
    held_id = next(
        e["id"] for e in events if e["type"] == "tool_call" and "sleep 30" in e["arguments"]
    )
    assert [m["tool_call_id"] for m in interrupted][0] == held_id
    results = [e for e in of_type(events, "tool_result") if e["id"] == held_id]
    assert len(results) == 1 and results[0]["interrupted"] is True
    # And last, where a model reads before its next move: the command, and what to do.
    last = sent_from(server, first_after)[0][-1]
    assert last["role"] == "user" and "sleep 30" in last["content"]
    assert "may or may not have run" in last["content"] and "Check whether" in last["content"]
    kept_every_turn(before, server, first_after)


def test_kill_while_waiting_for_the_model_asks_again(tmp_path, scripted_server):
    agent = CountingAgent(PARTS, hold_request_at=5)
    server = scripted_server(agent)
    before, first_after, result, after = crash_and_resume(
        tmp_path, server, agent, agent.request_held.is_set
    )

    events = check_log(tmp_path)
    resumed = check_resumed_from(before, events)
    assert resumed["interrupted_tools"] == []
    assert set(executions(tmp_path).values()) == {1}
    assert len(executions(tmp_path)) == PARTS
    kept_every_turn(before, server, first_after)
    # The unanswered request left nothing behind: one assistant event per turn.
    assert len(of_type(events, "assistant")) == TASK_TURNS


def test_kill_before_the_first_reply_resumes_from_the_start(tmp_path, scripted_server):
    agent = CountingAgent(PARTS, hold_request_at=1)
    server = scripted_server(agent)
    before, first_after, result, after = crash_and_resume(
        tmp_path, server, agent, agent.request_held.is_set
    )

    assert before["state"]["total_turns"] == 0
    check_resumed_from(before, check_log(tmp_path))
    kept_every_turn(before, server, first_after)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_kill_at_a_moment_chosen_by_seed(tmp_path, scripted_server, seed):
    after_events = random.Random(seed).randint(1, 45)
    agent = CountingAgent(PARTS)
    server = scripted_server(agent)
    before, first_after, result, after = crash_and_resume(
        tmp_path, server, agent, lambda: event_lines(tmp_path) >= after_events
    )

    events = check_log(tmp_path)
    check_resumed_from(before, events)
    assert set(executions(tmp_path).values()) == {1}
    kept_every_turn(before, server, first_after)


@pytest.mark.parametrize("seed", [5, 6, 7])
def test_kill_at_a_moment_chosen_by_seed_while_masking_and_restarting(
    tmp_path, scripted_server, seed
):
    after_events = random.Random(seed).randint(20, 50)  # the whole run writes about 59
    agent = CountingAgent(PARTS)
    server = scripted_server(agent, context_length=4096)
    before, first_after, result, after = crash_and_resume(
        tmp_path, server, agent, lambda: event_lines(tmp_path) >= after_events, **BIG_PARTS
    )

    events = check_log(tmp_path)
    check_resumed_from(before, events)
    assert set(executions(tmp_path).values()) == {1}


def test_kill_in_a_run_that_masks_and_restarts_keeps_its_counters(tmp_path, scripted_server):
    """Big parts in a small window: masking, wind-down and restarts before and after."""
    parts = 16  # masking rather than winding down: four parts no longer need a restart
    agent = CountingAgent(parts)
    server = scripted_server(agent, context_length=4096)
    before, first_after, result, after = crash_and_resume(
        tmp_path,
        server,
        agent,
        lambda: saved_restarts(tmp_path) >= 1,
        max_turns=60,
        parts=parts,
        chars_per_part=6000,
        model={"context_limit": 4096},
        context={"carryover_turns": 3},
    )

    events = check_log(tmp_path)
    check_resumed_from(before, events)
    context_before, context_after = before["state"]["context"], after["state"]["context"]
    assert context_after["total_masked"] >= context_before["total_masked"] > 0
    assert after["state"]["restarts"] >= before["state"]["restarts"] >= 1
    assert set(executions(tmp_path).values()) == {1}


def saved_restarts(root: Path) -> int:
    try:
        return snapshot(root)["state"]["restarts"]
    except (OSError, IndexError):
        return 0


def log_path(root: Path) -> Path:
    runs = list_runs(root / ".ouroboros")
    if not runs:
        return root / "missing"
    return root / ".ouroboros" / "runs" / runs[-1] / "events.jsonl"


# --- what resume refuses, and the torn line --------------------------------------------------


def killed_run(tmp_path: Path, server, agent: CountingAgent) -> Path:
    config, _ = demo_project(tmp_path, server.base_url, PARTS, max_turns=MAX_TURNS)
    process = start_forked("run", "--config", str(config), "--headless", root=tmp_path)
    try:
        wait_for(agent.request_held.is_set, "the held request", process)
    finally:
        kill(process)
    return config


def test_a_torn_last_line_is_dropped_and_reported(tmp_path, scripted_server):
    agent = CountingAgent(PARTS, hold_request_at=4)
    server = scripted_server(agent)
    config = killed_run(tmp_path, server, agent)
    whole = read_events(log_path(tmp_path)).events
    with log_path(tmp_path).open("a") as f:
        f.write('{"type": "assistant", "ts": "2025-01-01T00:00:00.000Z", "seq": ')

    result = ouroboros_here("resume", "--config", str(config), "--headless")

    assert result.returncode == 0, result.stderr
    assert "torn last log line dropped" in result.stdout
    log = read_events(log_path(tmp_path))
    assert log.torn_line is None
    assert log.events[: len(whole)] == whole
    assert of_type(log.events, "run_resumed")[0]["torn_line_dropped"] is True
    check_log(tmp_path)


def test_resume_of_a_run_at_its_max_turns_asks_for_more(tmp_path, scripted_server):
    server = scripted_server(CountingAgent(PARTS))
    config, _ = demo_project(tmp_path, server.base_url, PARTS, max_turns=2)
    assert ouroboros_here("run", "--config", str(config), "--headless").returncode == 3

    result = ouroboros_here("resume", "--config", str(config), "--headless")

    assert result.returncode == 3
    assert "has had its 2 turns" in result.stderr and "--max-turns N" in result.stderr
    assert "Traceback" not in result.stderr


def test_resume_with_no_run_is_exit_4_and_of_an_unknown_run_exit_2(tmp_path, scripted_server):
    server = scripted_server(CountingAgent(PARTS))
    config, _ = demo_project(tmp_path, server.base_url, PARTS, max_turns=2)
    result = ouroboros_here("resume", "--config", str(config), "--headless")
    assert result.returncode == 4 and "no runs" in result.stderr
    assert ouroboros_here("run", "--config", str(config), "--headless").returncode == 3

    result = ouroboros_here(
        "resume", "--config", str(config), "--run", "20990101-000000-beef", "--headless"
    )

    assert result.returncode == 2
    assert "20990101-000000-beef" in result.stderr and "Traceback" not in result.stderr


def test_resume_of_a_log_from_a_newer_format_is_exit_2(tmp_path, scripted_server):
    agent = CountingAgent(PARTS, hold_request_at=3)
    server = scripted_server(agent)
    config = killed_run(tmp_path, server, agent)
    lines = log_path(tmp_path).read_text().splitlines(keepends=True)
    first = json.loads(lines[0])
    lines[0] = json.dumps({**first, "format_version": 99}) + "\n"
    log_path(tmp_path).write_text("".join(lines))

    result = ouroboros_here("resume", "--config", str(config), "--headless")

    assert result.returncode == 2
    assert "newer" in result.stderr and "format 99" in result.stderr


def test_resume_names_the_run_to_continue(tmp_path, scripted_server):
    agent = CountingAgent(PARTS, hold_request_at=3)
    server = scripted_server(agent)
    config = killed_run(tmp_path, server, agent)
    run_id = list_runs(tmp_path / ".ouroboros")[0]

    result = ouroboros_here("resume", "--config", str(config), "--run", run_id, "--headless")

    assert result.returncode == 0, result.stderr
    assert list_runs(tmp_path / ".ouroboros") == [run_id]
    assert (tmp_path / "workspace" / "results.txt").exists()


# --- the lock --------------------------------------------------------------------------------


def test_a_second_harness_on_the_same_workspace_is_refused(tmp_path, scripted_server):
    agent = CountingAgent(PARTS, hold_request_at=2)
    server = scripted_server(agent)
    config, _ = demo_project(tmp_path, server.base_url, PARTS, max_turns=MAX_TURNS)
    first = start_forked("run", "--config", str(config), "--headless", root=tmp_path)
    try:
        wait_for(agent.request_held.is_set, "the first run to be working", first)
        for command in ("run", "resume"):
            result = ouroboros_here(command, "--config", str(config), "--headless")
            assert result.returncode == 2, result.stderr
            assert f"pid {first.pid}" in result.stderr and "Traceback" not in result.stderr
        assert first.poll() is None
    finally:
        kill(first)
    assert len(list_runs(tmp_path / ".ouroboros")) == 1


def test_a_stale_lock_is_taken_over_with_a_notice(tmp_path, scripted_server):
    server = scripted_server(CountingAgent(PARTS))
    config, _ = demo_project(tmp_path, server.base_url, PARTS, max_turns=3)
    gone = subprocess.Popen(["true"])
    gone.wait()
    state_dir = tmp_path / ".ouroboros"
    state_dir.mkdir()
    (state_dir / "lock").write_text(
        json.dumps(
            {"pid": gone.pid, "host": socket.gethostname(), "run_id": "20250101-000000-dead"}
        )
    )

    result = ouroboros_here("run", "--config", str(config), "--headless")

    assert result.returncode == 3, result.stderr
    assert f"stale lock left by pid {gone.pid}" in result.stdout
    warnings = of_type(check_log(tmp_path), "warning")
    assert any(str(gone.pid) in w["message"] for w in warnings)
    assert not (state_dir / "lock").exists()  # released at the end
    assert os.listdir(state_dir / "runs")


def test_the_handoff_after_a_kill_and_resume_remembers_the_whole_run(tmp_path, scripted_server):
    """What the handoff knows is folded from the log: a kill loses none of it (the files
    written before the crash are still named, the counts go on)."""
    agent = CountingAgent(8, hold_tool_at=3)
    server = scripted_server(agent)
    crash_and_resume(
        tmp_path, server, agent, lambda: (tmp_path / "held_tool").exists(), parts=8, **BIG_PARTS
    )

    events = run_events(tmp_path)
    resumed = of_type(events, "run_resumed")[0]["seq"]
    handoffs = [e for e in of_type(events, "handoff") if e["seq"] > resumed]
    assert handoffs, "no restart after the resume"
    for handoff in handoffs:
        before = [e for e in events if e["seq"] < handoff["seq"]]
        writes = sum(
            1 for e in of_type(before, "tool_result") if e["name"] == "file_write" and e["ok"]
        )
        turns = len({(e["session"], e["turn"]) for e in of_type(before, "assistant")})
        assert f"progress.md ({writes} writes)" in handoff["text"]
        assert f"{turns} turns, " in handoff["text"]  # the run's, not the session's


def test_the_torn_line_is_cut_from_the_log_not_from_where_a_link_points(tmp_path):
    """A link planted where events.jsonl should be is refused, and what it points to is
    left whole."""
    from ouroboros.loop.resume import drop_torn_line
    from ouroboros.store.log import EVENTS_FILE

    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("not the harness's\n")
    run = tmp_path / "run1"
    run.mkdir()
    (run / EVENTS_FILE).symlink_to(elsewhere)
    with pytest.raises(OSError, match="symbolic link"):
        drop_torn_line(run, 3)
    assert elsewhere.read_text() == "not the harness's\n"


def test_an_old_runs_result_file_is_not_read_through_a_link(tmp_path):
    """A result of a run from before packs is read from its own file, never through a link
    (a FIFO there would hang the resume)."""
    from ouroboros.store.observations import ObservationStore

    secret = tmp_path / "secret.txt"
    secret.write_text("not the run's\n")
    store = tmp_path / "observations"
    store.mkdir()
    (store / "obs-000001.txt").write_text("a result\r\n", newline="")
    (store / "obs-000002.txt").symlink_to(secret)
    os.mkfifo(store / "obs-000003.txt")
    reader = ObservationStore(store)
    assert reader.read("obs-000001") == "a result\r\n"
    assert reader.read("obs-000002") is None
    assert reader.read("obs-000003") is None
