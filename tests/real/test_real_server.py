"""The harness driven by a real model: llama.cpp's own server with SmolLM2-135M-Instruct, real
tool calls streamed in pieces, real usage, a real chat template (tests/real/tools.jinja).

What is asserted is what the harness must guarantee whatever a 135M model chooses to do: its
calls parsed and run, the server's counts read and compared with the harness's estimate,
restarts when the window fills, no prompt over the budget, a log that resumes. Not what the
model writes (it mostly copies the template's example call)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.crash_helpers import kill, wait_for
from tests.helpers import (
    make_project,
    of_type,
    ouroboros_forked,
    ouroboros_here,
    run_dir,
    run_events,
)
from tests.real.llama import LlamaServer

pytestmark = [pytest.mark.real, pytest.mark.timeout(240)]

MISSION = "Write short notes into files under notes/, one new file per reply."
QUIET_AGENT = {  # a 135M model repeats itself: the guards that would pause it are off
    "max_idle_turns": 0,
    "idle_pause_max_secs": 0,
    "stuck_repeats": 0,
    "stuck_cycles": 0,
    "redo_notice_repeats": 0,
    "redo_pause_repeats": 0,
}


def project(
    tmp_path: Path,
    server: LlamaServer,
    *,
    agent: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
    **model: Any,
) -> Path:
    """A project on the real server: greedy sampling, short replies."""
    return make_project(
        tmp_path,
        server.base_url,
        prompt=MISSION,
        model={
            "name": "smollm2",
            "temperature": 0.0,
            "max_output_tokens": 96,
            "max_retry_secs": 5,
            **model,
        },
        agent={**QUIET_AGENT, **(agent or {})},
        context=context or {},
    )


def figures(events: list[dict[str, Any]]) -> dict[str, Any]:
    """What docs/benchmarks.md reports of a run: turns, calls, restarts, and the harness's
    estimate of each prompt against the server's count."""
    usage = of_type(events, "token_usage")
    errors = [
        abs(u["estimated"] - u["reported"]) / u["reported"]
        for u in usage[1:]
        if u.get("reported") and u.get("estimated")
    ]
    return {
        "turns": len(of_type(events, "assistant")),
        "calls": len(of_type(events, "tool_call")),
        "restarts": len(of_type(events, "session_restart")),
        "worst_estimate_error": round(max(errors, default=0.0), 3),
        "over_budget": sum(1 for u in usage if (u.get("reported") or 0) > u["budget"]),
    }


def report(name: str, events: list[dict[str, Any]], started: float) -> dict[str, Any]:
    shown = {**figures(events), "secs": round(time.monotonic() - started, 1)}
    print(f"\n[real] {name}: {json.dumps(shown)}")
    return shown


def test_a_small_file_task_through_three_restarts(tmp_path, llama_server):
    started = time.monotonic()
    config = project(
        tmp_path,
        llama_server,
        context_limit=1024,
        agent={"max_turns": 60},
        context={"max_restarts": 3, "carryover_turns": 1},
    )
    ran = ouroboros_here("run", "-c", str(config), "--headless")
    assert (tmp_path / ".ouroboros" / "runs").is_dir(), ran.stdout + ran.stderr

    events = run_events(tmp_path)
    shown = report("three restarts", events, started)
    assert ran.returncode == 3, ran.stdout[-2000:] + ran.stderr
    assert events[-1]["reason"] == "max_restarts" and events[-1]["resumable"]
    assert shown["restarts"] == 3
    calls, results = of_type(events, "tool_call"), of_type(events, "tool_result")
    assert calls and [r["id"] for r in results] == [c["id"] for c in calls]
    assert any(r["ok"] for r in results)
    assert any(path.is_file() for path in (tmp_path / "workspace").rglob("*"))
    usage = of_type(events, "token_usage")
    assert all(u["source"] == "server" and u["verdict"] == "whole" for u in usage)
    assert shown["over_budget"] == 0
    assert shown["worst_estimate_error"] <= 0.10
    # the server's timings: the cached and the processed parts make its whole count, and
    # within a session, a prompt that extends the one before is mostly cached
    assert all(u["cached_tokens"] + u["processed_tokens"] == u["reported"] for u in usage)
    assert sum(u["cached_tokens"] for u in usage) > sum(u["processed_tokens"] for u in usage)


def test_a_call_cut_at_max_tokens_is_answered_and_the_run_goes_on(tmp_path, llama_server):
    started = time.monotonic()
    config = project(tmp_path, llama_server, max_output_tokens=18, agent={"max_turns": 3})
    ran = ouroboros_here("run", "-c", str(config), "--headless")

    events = run_events(tmp_path)
    report("cut at max_tokens", events, started)
    assert ran.returncode == 3, ran.stdout[-2000:] + ran.stderr  # not the server's 500
    assert len(of_type(events, "assistant")) == 3
    cut = [
        e
        for e in of_type(events, "assistant")
        if e["finish_reason"] == "length" and e["tool_calls"]
    ]
    assert cut, "the model's calls were not cut: max_output_tokens too high for the test"
    results = of_type(events, "tool_result")
    assert [r for r in results if "cut off" in r["summary"] and not r["ok"]]
    assert not of_type(events, "retry") and not of_type(events, "error")


def test_a_run_killed_mid_task_resumes_where_it_was(tmp_path, llama_server):
    started = time.monotonic()
    config = project(tmp_path, llama_server, agent={"max_turns": 40})
    process = ouroboros_forked(
        "run", "-c", str(config), "--headless", out=tmp_path / "out", err=tmp_path / "err"
    )
    try:
        wait_for(
            lambda: (
                (tmp_path / ".ouroboros" / "runs").is_dir()
                and len(of_type(run_events(tmp_path), "tool_result")) >= 3
            ),
            "three tool results",
            process,
            timeout=120,
        )
    finally:
        kill(process)
    assert process.returncode == -signal.SIGKILL
    before = run_events(tmp_path)

    ran = ouroboros_here("resume", "-c", str(config), "--headless", "--max-turns", "3")
    events = run_events(tmp_path)
    report("kill -9 and resume", events, started)
    assert ran.returncode == 3, ran.stdout[-2000:] + ran.stderr
    assert len(list(run_dir(tmp_path).parent.iterdir())) == 1  # the same run, continued
    resumed = next(i for i, e in enumerate(events) if e["type"] == "run_resumed")
    assert events[: len(before) - 1] == before[:-1]  # the log continued, not rewritten
    after = events[resumed:]
    assert len(of_type(after, "assistant")) == 3
    assert of_type(after, "tool_result") and of_type(after, "token_usage")
    assert events[-1]["type"] == "run_end" and events[-1]["reason"] == "max_turns"


def test_a_window_too_small_for_the_prompt_and_tools_is_refused_at_the_start(
    tmp_path, llama_server
):
    config = project(tmp_path, llama_server, context_limit=400, agent={"max_turns": 3})
    ran = ouroboros_here("run", "-c", str(config), "--headless")

    assert ran.returncode == 2, ran.stdout[-2000:] + ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and "counted by the server" in lines[0], lines
    assert "304-token prompt budget" in lines[0] and "model.context_limit" in lines[0]
    assert not (tmp_path / ".ouroboros" / "runs").exists()  # no request, no run recorded
    print(f"\n[real] window too small: {lines[0]}")


def test_a_reply_in_a_small_window_is_asked_for_what_it_leaves(tmp_path, llama_server):
    config = project(
        tmp_path, llama_server, context_limit=1024, max_output_tokens=2048, agent={"max_turns": 1}
    )
    ran = ouroboros_here("run", "-c", str(config), "--headless")

    assert ran.returncode == 3, ran.stdout[-2000:] + ran.stderr
    usage = of_type(run_events(tmp_path), "token_usage")
    assert usage[0]["reported"] + 256 <= 1024  # the prompt and the most the reply may take


def test_a_template_without_tools_is_named_at_the_start_and_after_five_replies(
    tmp_path, toolless_server
):
    started = time.monotonic()
    assert toolless_server.props()["chat_template_caps"]["supports_tools"] is False
    config = project(tmp_path, toolless_server, max_output_tokens=32, agent={"max_turns": 5})
    ran = ouroboros_here("run", "-c", str(config), "--headless")

    events = run_events(tmp_path)
    report("template without tools", events, started)
    assert ran.returncode == 3, ran.stdout[-2000:] + ran.stderr
    warnings = [e["message"] for e in of_type(events, "warning")]
    start = [w for w in warnings if "chat_template_caps.supports_tools is false" in w]
    assert len(start) == 1 and "--jinja" in start[0]
    assert not of_type(events, "tool_call")
    assert len([w for w in warnings if "first 5 replies held no tool call" in w]) == 1
