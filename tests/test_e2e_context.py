"""A long task in a small window: masking, wind-down, restarts with carryover, and the task
finished without overflowing the model's context or redoing work."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from ouroboros.config import load_config
from ouroboros.demo import RecordingAgent, expected_results, write_demo_project
from ouroboros.loop.runner import run_agent
from ouroboros.protocols import RunHooks
from ouroboros.testing import Reply, ScriptedServer
from ouroboros.window.probes import RETEST_FILLER
from tests.helpers import of_type, run_events

CONTEXT = 4096
PARTS = 14
NOT_MADE_REAL = {"model.ensure_window": False}
"""Some runs are about servers that hold less than the claim: the window is not made real
(tests/test_ensure_window.py makes it)."""


def run_task(tmp_path, server: ScriptedServer, parts: int = PARTS, **context):
    keys = write_demo_project(tmp_path, server.base_url, parts)
    flags = {
        "safety.sandbox": "off",
        **NOT_MADE_REAL,
        **{f"context.{k}": v for k, v in context.items()},
    }
    loaded = load_config(tmp_path / "ouroboros.toml", flags, env={}, user_file=None)
    code = asyncio.run(run_agent(loaded, RunHooks()))
    return code, keys


@pytest.mark.parametrize(
    "usage,wire,fragment",
    [
        (True, "current", False),
        (False, "current", False),
        (True, "legacy", True),
    ],
)
def test_long_task_in_a_small_window(tmp_path, usage, wire, fragment):
    brain = RecordingAgent(PARTS)
    with ScriptedServer(
        brain,
        model="scripted-demo",
        context_length=CONTEXT,
        send_usage=usage,
        wire=wire,
        fragment_tool_calls=fragment,
    ) as server:
        code, keys = run_task(tmp_path, server)

    assert code == 0
    # The task finished, every part recorded once, in order: no work lost or redone.
    assert (tmp_path / "workspace/results.txt").read_text() == expected_results(keys)
    # The model never got a prompt over its window.
    assert server.over_limit == 0
    assert max(server.prompt_tokens) <= CONTEXT
    events = run_events(tmp_path)
    assert events[-1]["type"] == "run_end" and events[-1]["reason"] == "task_complete"
    sources = [e["source"] for e in of_type(events, "token_usage")]
    # Besides the probes that test the window (filler, a few a run), the server is asked to
    # count a prompt only when its stream carried no count: once a session.
    probes = [r for r in server.count_requests if RETEST_FILLER in json.dumps(r["messages"])]
    assert len(probes) <= 4
    counted = len(server.count_requests) - len(probes)
    if usage:
        assert set(sources) == {"server"} and not counted
    else:
        sessions = len(of_type(events, "session_start"))
        assert sources.count("server") == counted == sessions
    masks = of_type(events, "context_mask")
    assert masks and all(m["reclaimed_pct"] > 0 for m in masks)
    assert all(m["tokens_after"] < m["tokens_before"] for m in masks)
    assert of_type(events, "wind_down")
    restarts = of_type(events, "session_restart")
    assert restarts and restarts[0]["carryover_messages"] > 0
    if not usage:
        assert any("no token usage" in w["message"] for w in of_type(events, "warning"))


def test_masking_placeholders_and_notices_reach_the_model(tmp_path):
    with ScriptedServer(
        RecordingAgent(PARTS), model="scripted-demo", context_length=CONTEXT
    ) as server:
        run_task(tmp_path, server)
    masked_request = next(
        r
        for r in server.requests
        if any("file_read result masked: data/" in (m.get("content") or "") for m in r["messages"])
    )
    messages = masked_request["messages"]
    placeholder = next(
        m for m in messages if "file_read result masked: data/" in (m.get("content") or "")
    )
    assert placeholder["role"] == "tool"
    assert re.match(
        r"\[file_read result masked: data/part_\d{3}\.txt, \d+ lines, [\d.]+ KB, "
        r'began "KEY: [0-9a-f]+"\. recall\(id="obs-\d+"\)',
        placeholder["content"],
    )
    # The call it answers is still there, arguments intact.
    call_ids = {c["id"] for m in messages for c in m.get("tool_calls") or ()}
    assert placeholder["tool_call_id"] in call_ids
    notices = [
        m["content"]
        for m in messages
        if (m.get("content") or "").startswith("[Context compressed:")
    ]
    assert notices and re.match(
        r"\[Context compressed: \d+ observations masked, ~\d+% of the "
        r"context reclaimed\]",
        notices[0],
    )
    assert "~0%" not in notices[0]


def test_restart_rereads_the_prompt_and_carries_over_whole_turns(tmp_path):
    edited = "EDITED MISSION"

    class EditingAgent(RecordingAgent):
        """Edits its own SYSTEM_PROMPT.md on disk when asked to wind down."""

        def __call__(self, messages):
            if "Context nearly full" in (messages[-1].get("content") or ""):
                (tmp_path / "SYSTEM_PROMPT.md").write_text(edited)
            return super().__call__(messages)

    with ScriptedServer(
        EditingAgent(PARTS), model="scripted-demo", context_length=CONTEXT
    ) as server:
        run_task(tmp_path, server, carryover_turns=2)
    events = run_events(tmp_path)
    restart = of_type(events, "session_restart")[0]
    first_after = next(
        r
        for r in server.requests
        if "[Session 2 of this run begins" in r["messages"][-1]["content"]
    )["messages"]
    assert first_after[0]["role"] == "system"
    assert first_after[0]["content"].startswith(edited + "\n")  # then the agent's memory
    assert first_after[1]["content"].startswith("[Carried over from session 1")
    last = first_after[-1]["content"]  # the restart note and the handoff, read last
    assert last.startswith(
        f"[Session 2 of this run begins with a fresh context. Session 1 "
        f"ended after {restart['previous_turns']} turns"
    )
    assert "re-read your notes" in last.splitlines()[-1]
    carried = first_after[2:-1]
    assert len(carried) == restart["carryover_messages"]
    assert 1 <= sum(1 for m in carried if m["role"] == "assistant") <= 2  # as many as fit
    call_ids = [c["id"] for m in carried for c in m.get("tool_calls") or ()]
    result_ids = [m["tool_call_id"] for m in carried if m["role"] == "tool"]
    assert call_ids == result_ids  # no call without its result, no result without its call
    assert not any("Context nearly full" in (m.get("content") or "") for m in first_after)


def test_max_restarts_stops_the_run(tmp_path):
    with ScriptedServer(
        RecordingAgent(40), model="scripted-demo", context_length=CONTEXT
    ) as server:
        code, _ = run_task(tmp_path, server, parts=40, max_restarts=1)
    assert code == 3
    events = run_events(tmp_path)
    assert len(of_type(events, "session_restart")) == 1
    assert events[-1]["reason"] == "max_restarts"


def test_headless_run_without_auto_restart_stops_instead_of_asking(tmp_path):
    with ScriptedServer(
        RecordingAgent(40), model="scripted-demo", context_length=CONTEXT
    ) as server:
        run_task(tmp_path, server, parts=40, auto_restart=False)
    events = run_events(tmp_path)
    assert not of_type(events, "session_restart")
    assert events[-1]["reason"] == "restart_declined"


@pytest.mark.parametrize("overflow", ["error", "empty"])
def test_overflow_errors_are_recovered(tmp_path, overflow):
    """A server whose real window is smaller than the configured one refuses the prompt; the
    harness shrinks it and goes on."""
    with ScriptedServer(
        RecordingAgent(PARTS),
        model="scripted-demo",
        context_length=2500,
        overflow=overflow,
        api_ps="silent",
    ) as server:
        code, keys = run_task(tmp_path, server)
    assert code == 0
    events = run_events(tmp_path)
    recovered = of_type(events, "context_overflow_recovered")
    assert recovered
    assert (tmp_path / "workspace/results.txt").read_text() == expected_results(keys)


def test_silent_truncation_is_detected_and_the_limit_lowered(tmp_path):
    """The config claims 16k but the server (like Ollama's default) holds 2.5k and silently
    cuts the front of longer prompts."""
    with ScriptedServer(
        RecordingAgent(PARTS),
        model="scripted-demo",
        context_length=2500,
        overflow="truncate",
        api_ps="silent",
    ) as server:
        keys = write_demo_project(tmp_path, server.base_url, PARTS)
        loaded = load_config(
            tmp_path / "ouroboros.toml",
            {"model.context_limit": 16384, **NOT_MADE_REAL},
            env={},
            user_file=None,
        )
        asyncio.run(run_agent(loaded, RunHooks()))
    events = run_events(tmp_path)
    detected = of_type(events, "context_truncation_detected")
    assert len(detected) >= 1
    assert detected[0]["new_limit"] <= 2500
    warnings = [w["message"] for w in of_type(events, "warning")]
    assert any("OLLAMA_CONTEXT_LENGTH" in w for w in warnings)
    assert (tmp_path / "workspace/results.txt").read_text() == expected_results(keys)


def test_recall_returns_the_original_text(tmp_path):
    brain_calls = [
        Reply("", [("shell_exec", {"command": "seq 1 20000"})]),
        Reply("", [("recall", {"id": "obs-1", "offset": 50000})]),
        Reply("", [("recall", {"id": "obs-99"})]),
        Reply("done"),
    ]
    with ScriptedServer(brain_calls, model="scripted-demo", context_length=CONTEXT) as server:
        write_demo_project(tmp_path, server.base_url, 1)
        loaded = load_config(
            tmp_path / "ouroboros.toml", {"agent.max_turns": 4}, env={}, user_file=None
        )
        asyncio.run(run_agent(loaded, RunHooks()))
    results = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert "characters cut" in results[0] and 'recall(id="obs-1"' in results[0]
    full = "".join(f"{i}\n" for i in range(1, 20001))
    assert results[1].startswith(full[50000:50100])
    assert results[2].startswith("error: no observation 'obs-99'")
