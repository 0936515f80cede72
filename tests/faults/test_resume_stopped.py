"""Any stopped run can be continued with `ouroboros resume`, with the flags it started with:
after Ctrl+C or SIGTERM (during a tool call), max_turns (`--max-turns N` for N more),
task_complete and an idle pause (`--message` for a new instruction), an error and a crash.
The agent's appends (not idempotent) show that no work was lost or done twice: each part is
in parts.txt exactly once, and no tool call was started twice."""

from __future__ import annotations

import signal
from collections import Counter

import pytest

from ouroboros.store.log import list_runs
from ouroboros.testing import Fault
from ouroboros.ui.dashboard import parse_ts
from tests.crash_helpers import kill
from tests.faults.parts_agent import (
    PartsAgent,
    expected_parts,
    held_pid,
    log_text,
    parts_project,
    start_forked,
    stop_and_time,
)
from tests.helpers import of_type, ouroboros_here, run_events


def parts(root, workspace: str = "workspace") -> str:
    path = root / workspace / "parts.txt"
    return path.read_text() if path.exists() else ""


def check_once(root) -> list[dict]:
    events = run_events(root)
    started = Counter(e["id"] for e in events if e["type"] == "tool_call")
    assert set(started.values()) == {1}, started.most_common(2)
    return events


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name
)
def test_a_run_stopped_during_a_tool_call_resumes_without_losing_or_redoing_work(
    tmp_path, scripted_server, sig
):
    server = scripted_server(PartsAgent(4, hold_part=2))
    config = parts_project(tmp_path, server.base_url)
    process = start_forked(tmp_path, "run", "--config", str(config))
    try:
        held_pid(tmp_path, process)
        stop_and_time(process, sig)
    finally:
        kill(process)
    assert parts(tmp_path) == expected_parts(1)

    result = ouroboros_here("resume", "--config", str(config), "--headless")

    assert result.returncode == 0, result.stderr + result.stdout
    assert parts(tmp_path) == expected_parts(4)
    events = check_once(tmp_path)
    assert events[-1]["reason"] == "task_complete"
    assert events[-1]["summary"] == "parts 1 to 4 are in parts.txt"
    interrupted = [e for e in of_type(events, "tool_result") if e.get("interrupted")]
    assert len(interrupted) == 1 and "sleep 30" in next(
        e["arguments"] for e in of_type(events, "tool_call") if e["id"] == interrupted[0]["id"]
    )


def test_max_turns_is_remembered_and_extended_with_the_flags_the_run_began_with(
    tmp_path, scripted_server
):
    server = scripted_server(PartsAgent(5))
    config = parts_project(tmp_path, server.base_url)
    (tmp_path / "alt_ws").mkdir()
    first = ouroboros_here(
        "run",
        "--config",
        str(config),
        "--workspace",
        "alt_ws",
        "--max-turns",
        "2",
        "--headless",
        cwd=tmp_path,
    )
    assert first.returncode == 3, first.stderr
    assert run_events(tmp_path)[-1]["reason"] == "max_turns"
    assert "--max-turns N" in first.stdout

    again = ouroboros_here("resume", "--config", str(config), "--headless")
    assert again.returncode == 3 and "--max-turns N" in again.stderr  # the limit it had

    more = ouroboros_here("resume", "--config", str(config), "--max-turns", "2", "--headless")
    assert more.returncode == 3, more.stderr
    assert run_events(tmp_path)[-1]["reason"] == "max_turns"
    assert run_events(tmp_path)[-1]["total_turns"] == 4
    done = ouroboros_here("resume", "--config", str(config), "--max-turns", "0", "--headless")

    assert done.returncode == 0, done.stderr
    assert parts(tmp_path, "alt_ws") == expected_parts(5)
    assert parts(tmp_path) == ""  # the config's workspace was never written to
    events = check_once(tmp_path)
    assert events[-1]["reason"] == "task_complete"
    assert events[0]["flags"] == {"agent.workspace": str(tmp_path / "alt_ws"), "agent.max_turns": 2}
    assert [e["flags"]["agent.max_turns"] for e in of_type(events, "run_resumed")] == [4, 0]


def test_a_complete_run_takes_a_new_instruction(tmp_path, scripted_server):
    server = scripted_server(PartsAgent(2))
    config = parts_project(tmp_path, server.base_url)
    first = ouroboros_here("run", "--config", str(config), "--headless")
    assert first.returncode == 0, first.stderr
    assert "run ended: task_complete: parts 1 to 2 are in parts.txt" in first.stdout
    assert "ouroboros resume --message" in first.stdout

    bare = ouroboros_here("resume", "--config", str(config), "--headless")
    assert bare.returncode == 4 and "--message" in bare.stderr and "is complete" in bare.stderr

    more = ouroboros_here(
        "resume", "--config", str(config), "--message", "Now do parts up to 4.", "--headless"
    )

    assert more.returncode == 0, more.stderr
    assert parts(tmp_path) == expected_parts(4)
    events = check_once(tmp_path)
    assert of_type(events, "run_resumed")[-1]["message"] == "Now do parts up to 4."
    assert [e["reason"] for e in of_type(events, "run_end")] == ["task_complete"] * 2


def test_an_idle_agent_is_paused_and_goes_on_when_told(tmp_path, scripted_server):
    agent = PartsAgent(3, idle_after=1)
    server = scripted_server(agent)
    config = parts_project(tmp_path, server.base_url, max_idle_turns=2)
    first = ouroboros_here("run", "--config", str(config), "--headless")

    assert first.returncode == 3, first.stderr
    end = run_events(tmp_path)[-1]
    # a part, the agent's news (new text is not idle), then the same news twice: idle
    assert (end["reason"], end["total_turns"], end["resumable"]) == ("idle", 4, True)
    assert "said nothing new in 2 turns in a row" in first.stdout
    assert 'ouroboros resume --message "what to do next"' in first.stdout
    idle_requests = server.requests[1:]
    assert [r["messages"][-1]["content"] for r in idle_requests][-1].startswith("Continue")

    more = ouroboros_here(
        "resume", "--config", str(config), "--message", "Go on, please.", "--headless"
    )

    assert more.returncode == 0, more.stderr
    assert parts(tmp_path) == expected_parts(3)
    assert run_events(tmp_path)[-1]["reason"] == "task_complete"
    check_once(tmp_path)


def test_idle_turns_back_off_before_the_continue_message(tmp_path, scripted_server):
    server = scripted_server(PartsAgent(3, idle_after=0))
    config = parts_project(tmp_path, server.base_url, max_idle_turns=3)
    result = ouroboros_here("run", "--config", str(config), "--headless")

    assert result.returncode == 3, result.stderr
    events = run_events(tmp_path)
    # the first reply is news (not idle); the next three repeat it
    assert events[-1]["reason"] == "idle" and events[-1]["total_turns"] == 4
    assert [(e["idle_turns"], e["pause_secs"]) for e in of_type(events, "idle")] == [(2, 2.0)]
    asked = [e for e in events if e["type"] == "assistant"]
    # the first idle continue comes at once (no idle event before it), the second after 2 s
    assert seconds_between(asked[2], asked[3]) >= 2.0


def seconds_between(a: dict, b: dict) -> float:
    return (parse_ts(b["ts"]) - parse_ts(a["ts"])).total_seconds()


def test_a_run_that_failed_resumes(tmp_path, scripted_server):
    agent = PartsAgent(3)
    script = iter([None, Fault("status", 401, "unauthorized")])

    def brain(messages):
        fault = next(script, None)
        return fault if fault is not None else agent(messages)

    server = scripted_server(brain)
    config = parts_project(tmp_path, server.base_url)
    failed = ouroboros_here("run", "--config", str(config), "--headless")
    assert failed.returncode == 2 and run_events(tmp_path)[-1]["exit_code"] == 2
    assert parts(tmp_path) == expected_parts(1)

    result = ouroboros_here("resume", "--config", str(config), "--headless")

    assert result.returncode == 0, result.stderr + log_text(tmp_path)
    assert parts(tmp_path) == expected_parts(3)
    check_once(tmp_path)


def test_a_resumes_max_turns_is_for_that_resume_only(tmp_path, scripted_server):
    server = scripted_server(PartsAgent(5))
    config = parts_project(tmp_path, server.base_url, max_turns=2)
    assert ouroboros_here("run", "--config", str(config), "--headless").returncode == 3  # paused
    more = ouroboros_here("resume", "--config", str(config), "--max-turns", "1", "--headless")
    assert more.returncode == 3, more.stderr
    assert run_events(tmp_path)[-1]["total_turns"] == 3
    assert (
        ouroboros_here("config", "set", "agent.max_turns", "0", "--config", str(config)).returncode
        == 0
    )

    plain = ouroboros_here("resume", "--config", str(config), "--headless")

    assert plain.returncode == 0, plain.stderr  # not refused for the earlier resume's limit
    assert parts(tmp_path) == expected_parts(5)
    assert check_once(tmp_path)[-1]["reason"] == "task_complete"


def test_a_refused_resume_names_where_the_limit_was_set(tmp_path, scripted_server):
    server = scripted_server(PartsAgent(5))
    config = parts_project(tmp_path, server.base_url, max_turns=2)
    assert ouroboros_here("run", "--config", str(config), "--headless").returncode == 3  # paused

    from_file = ouroboros_here("resume", "--config", str(config), "--headless")
    ouroboros_here("config", "set", "agent.max_turns", "0", "--config", str(config))
    first = list_runs(tmp_path / ".ouroboros")
    ouroboros_here("run", "--config", str(config), "--max-turns", "1", "--headless")
    # named: two runs started in the same second do not sort by their start
    [second] = set(list_runs(tmp_path / ".ouroboros")) - set(first)
    from_flag = ouroboros_here("resume", "--config", str(config), "--run", second, "--headless")

    assert from_file.returncode == 3  # still paused
    assert (
        f"(agent.max_turns = 2 in {config}); `ouroboros resume --max-turns N`" in from_file.stderr
    )
    assert from_flag.returncode == 3
    assert "has had its 1 turn (--max-turns 1, given to `ouroboros run`)" in from_flag.stderr
