"""The long task in a small window against servers that count tokens their own way.

The scripted server counts with a tokenizer of the matrix (none of them the harness's
estimate), and reports usage in each broken way real servers do. Whatever it does, the run
must finish with no request over the server's window, no part redone, no false truncation
alarm and a bounded number of restarts; and real truncation must still be caught.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter

import pytest

from ouroboros.config import load_config
from ouroboros.demo import RecordingAgent, expected_results, part_name, write_demo_project
from ouroboros.errors import EXIT_PAUSED, RunFailed
from ouroboros.loop.runner import run_agent
from ouroboros.protocols import RunHooks
from ouroboros.testing import Fault, Reply, ScriptedServer
from ouroboros.testing.tokenizer import TOKENIZERS
from tests.helpers import make_project, of_type, ouroboros_here, run_events, sweep

WINDOW = 4096
PARTS = 12
# The tokenizers every change meets (the rest of the matrix runs with -m sweep, and in CI):
# the densest estimate's foe, a byte-level BPE, and one that strips reasoning.
TOKENIZER_SAMPLE = {"cpt-2.5", "bpe-bytes", "strip-reasoning"}
MAX_RESTARTS = PARTS  # a restart per part at the very worst; storms ran into the hundreds


class ThinkingAgent(RecordingAgent):
    """Thinks aloud in `<think>` blocks inside its text, as some models do on /v1."""

    def __call__(self, messages):
        reply = super().__call__(messages)
        thought = "<think>" + "Let me consider what the next step should be. " * 12 + "</think>"
        return Reply(f"{thought}{reply.text}", reply.tool_calls)


NOT_MADE_REAL = {"model.ensure_window": False}
"""These runs are about servers that hold less than the claim: the window is not made real
(tests/test_ensure_window.py makes it)."""


def run_task(tmp_path, server, parts=PARTS, **flags):
    keys = write_demo_project(tmp_path, server.base_url, parts)
    loaded = load_config(
        tmp_path / "ouroboros.toml",
        {"model.context_limit": WINDOW, "safety.sandbox": "off", **NOT_MADE_REAL, **flags},
        env={},
        user_file=None,
    )
    code = asyncio.run(run_agent(loaded, RunHooks()))
    return code, keys


def parts_read(events) -> Counter:
    return Counter(
        m.group(1)
        for e in of_type(events, "tool_call")
        if (m := re.search(r"part_(\d+)", e["arguments"])) and e["name"] == "file_read"
    )


def assert_finished_cleanly(tmp_path, server, code, keys):
    events = run_events(tmp_path)
    assert code == 0
    assert (tmp_path / "workspace/results.txt").read_text() == expected_results(keys)
    assert server.over_limit == 0, f"prompts over the window: {server.over_limit}"
    assert not of_type(events, "context_truncation_detected")
    assert not [e for e in of_type(events, "warning") if "cut the front" in e["message"]]
    assert len(of_type(events, "session_restart")) <= MAX_RESTARTS
    redone = [part for part, n in parts_read(events).items() if n > 1]
    assert not redone, f"parts read more than once: {redone}"
    return events


@pytest.mark.parametrize("name", sweep(sorted(TOKENIZERS), TOKENIZER_SAMPLE, sorted(TOKENIZERS)))
def test_the_task_finishes_on_any_tokenizer(tmp_path, name):
    agent = ThinkingAgent(PARTS) if name == "strip-reasoning" else RecordingAgent(PARTS)
    with ScriptedServer(
        agent, model="scripted-demo", context_length=WINDOW, tokenizer=TOKENIZERS[name]
    ) as server:
        code, keys = run_task(tmp_path, server)
    events = assert_finished_cleanly(tmp_path, server, code, keys)
    sources = [e["source"] for e in of_type(events, "token_usage")]
    assert sources.count("estimate") <= 1  # a first count far below the estimate waits a turn


USAGES = ["zero", "null", "absent", "uncached", "negative", "huge", "decreasing"]


@pytest.mark.parametrize("usage", sweep(USAGES, {"null", "uncached", "decreasing"}, USAGES))
def test_the_task_finishes_whatever_the_server_reports(tmp_path, usage):
    with ScriptedServer(
        RecordingAgent(PARTS), model="scripted-demo", context_length=WINDOW, usage=usage
    ) as server:
        code, keys = run_task(tmp_path, server)
    events = assert_finished_cleanly(tmp_path, server, code, keys)
    warnings = " ".join(w["message"] for w in of_type(events, "warning"))
    said = {
        "uncached": "uncached",
        "negative": "no prompt has that count",
        "huge": "no prompt has that count",
        "decreasing": "kept falling while the prompt grew",
    }
    assert warnings.count(said.get(usage, "no token usage")) == 1


@pytest.mark.parametrize("name", ["words", "bpe-bytes"])
def test_falling_counts_from_a_server_silent_on_its_window_are_not_truncation(tmp_path, name):
    with ScriptedServer(
        RecordingAgent(PARTS),
        model="scripted-demo",
        context_length=WINDOW,
        tokenizer=TOKENIZERS[name],
        usage="decreasing",
        api_ps="silent",
    ) as server:
        code, keys = run_task(tmp_path, server)
    events = assert_finished_cleanly(tmp_path, server, code, keys)
    warnings = [w["message"] for w in of_type(events, "warning")]
    assert len([w for w in warnings if "kept falling while the prompt grew" in w]) == 1
    assert {e["context_limit"] for e in of_type(events, "token_usage")} == {WINDOW}


def test_cached_tokens_are_read_and_recorded(tmp_path):
    with ScriptedServer(
        RecordingAgent(3), model="scripted-demo", context_length=WINDOW, report_cached=True
    ) as server:
        run_task(tmp_path, server, parts=3)
    cached = [e["cached_tokens"] for e in of_type(run_events(tmp_path), "token_usage")]
    assert cached[0] == 0 and all(c > 0 for c in cached[1:])  # the first found nothing


@pytest.mark.parametrize("name", sweep(sorted(TOKENIZERS), TOKENIZER_SAMPLE, sorted(TOKENIZERS)))
def test_real_truncation_is_caught_on_any_tokenizer(tmp_path, name):
    """The config claims 16k but the server holds 2.5k and silently cuts longer prompts, and
    its /api/ps says nothing."""
    with ScriptedServer(
        RecordingAgent(PARTS),
        model="scripted-demo",
        context_length=2500,
        tokenizer=TOKENIZERS[name],
        api_ps="silent",
    ) as server:
        code, keys = run_task(tmp_path, server, **{"model.context_limit": 16384})
    assert code == 0
    events = run_events(tmp_path)
    detected = of_type(events, "context_truncation_detected")
    assert detected and detected[0]["new_limit"] <= 2500
    assert any("OLLAMA_CONTEXT_LENGTH" in w["message"] for w in of_type(events, "warning"))
    assert (tmp_path / "workspace/results.txt").read_text() == expected_results(keys)
    # Once caught, the run works within the window: only the requests that revealed the cut,
    # the one before the refit and (on the densest tokenizer, where the tool schemas weigh
    # most) the first after it, while the ledger still learns the schemas' share, went over.
    assert server.over_limit <= 4
    later = [e for e in of_type(events, "session_start") if e["seq"] > detected[0]["seq"]]
    assert all(e["context_limit"] <= 2500 for e in later)


class NotesIgnoringAgent(RecordingAgent):
    """Never reads its notes: each session begins afresh from the data, the restart note and
    the turns carried over unread."""

    def __call__(self, messages):
        restarted = [
            i
            for i, m in enumerate(messages)
            if m["role"] == "user" and "re-read your notes" in m["content"]
        ]
        if restarted:
            messages = [messages[0], *messages[restarted[-1] + 1 :]]
        return super().__call__(messages)

    def after_listing(self, listing, messages):
        return Reply("Starting with part 1.", [("file_read", {"path": part_name(1)})])


def test_a_window_that_holds_one_step_a_session_pauses_the_run_not_spins_it(tmp_path):
    """2.5k held of 16k claimed, the tools taking most of it: a session holds one part, and
    an agent that never reads its notes after a restart records part 1 again every session.
    Each session does some work, so no session alone looks barren; the sessions in a row
    that only redo add up, and the run pauses (resumable) instead of restarting for ever."""
    with ScriptedServer(
        NotesIgnoringAgent(PARTS),
        model="scripted-demo",
        context_length=2500,
        tokenizer=TOKENIZERS["cpt-2.5"],
        api_ps="silent",
    ) as server:
        code, _ = run_task(tmp_path, server, **{"model.context_limit": 16384})
    events = run_events(tmp_path)
    assert code == EXIT_PAUSED
    assert [(e["kind"], e["action"]) for e in of_type(events, "stuck")][-1] == (
        "redoing",
        "pause",
    )
    assert len(of_type(events, "session_restart")) <= 8


@pytest.mark.parametrize("name", ["words", "by-content"])
def test_ollamas_allocation_caps_the_claim_from_the_first_reply(tmp_path, name):
    """The README's example: model.context_limit = 8192 while Ollama was started without
    OLLAMA_CONTEXT_LENGTH and allocated 2500. /api/ps says so once the model is loaded: the
    harness believes it from the second request on, and says how to fix it, once."""
    with ScriptedServer(
        RecordingAgent(PARTS),
        model="scripted-demo",
        context_length=WINDOW,
        allocated=2500,
        tokenizer=TOKENIZERS[name],
    ) as server:
        code, keys = run_task(tmp_path, server, **{"model.context_limit": 8192})
    assert code == 0
    assert (tmp_path / "workspace/results.txt").read_text() == expected_results(keys)
    assert server.over_limit <= 2
    events = run_events(tmp_path)
    usages = of_type(events, "token_usage")
    assert usages[0]["context_limit"] == 2500  # asked right after the first reply
    assert all(e["context_limit"] == 2500 for e in usages)
    warned = [
        w["message"] for w in of_type(events, "warning") if "OLLAMA_CONTEXT_LENGTH" in w["message"]
    ]
    assert len(warned) == 1 and "context_limit = 2500" in warned[0]
    assert not of_type(events, "context_truncation_detected")


def test_counting_with_the_servers_tokenizer_where_it_has_one(tmp_path):
    """A llama.cpp-style server: no usage in streams, but /tokenize counts exactly."""
    with ScriptedServer(
        RecordingAgent(PARTS),
        model="scripted-demo",
        context_length=WINDOW,
        send_usage=False,
        tokenize="llama.cpp",
        tokenizer=TOKENIZERS["by-content"],
    ) as server:
        code, keys = run_task(tmp_path, server)
    assert server.tokenize_requests > PARTS
    assert_finished_cleanly(tmp_path, server, code, keys)


# --- runs that cannot progress stop, with a reason a person can act on ----------------------


@pytest.mark.parametrize("window,short", [(2048, True), (WINDOW, False)])
def test_a_small_window_gets_the_tools_in_short(tmp_path, window, short):
    """In 2048 tokens the system prompt and the full tool definitions would take over half
    the prompt's budget: the tools go out in short, and the log says why, once."""
    with ScriptedServer(
        RecordingAgent(3),
        model="scripted-demo",
        context_length=window,
        tokenizer=TOKENIZERS["bpe-bytes"],
    ) as server:
        code, keys = run_task(tmp_path, server, parts=3, **{"model.context_limit": window})
    assert code == 0
    described = {len(json.dumps(request["tools"])) for request in server.requests}
    properties = [
        spec
        for tool in server.requests[-1]["tools"]
        for spec in tool["function"]["parameters"]["properties"].values()
    ]
    assert len(described) == 1  # the same form all run long
    assert any("description" in spec for spec in properties) is not short
    said = [
        w["message"]
        for w in of_type(run_events(tmp_path), "warning")
        if "described in short" in w["message"]
    ]
    assert len(said) == short
    if short:
        assert "of the 1536-token prompt budget of a 2048-token window" in said[0]


def test_a_system_prompt_that_fills_the_window_stops_the_run_with_the_fix(tmp_path):
    huge_prompt = "Remember every rule of the archive office carefully. " * 420
    with ScriptedServer(
        RecordingAgent(PARTS), model="scripted-demo", context_length=WINDOW
    ) as server:
        config = make_project(
            tmp_path,
            server.base_url,
            prompt=huge_prompt,
            model={"name": "scripted-demo", "context_limit": WINDOW, "max_output_tokens": 512},
        )
        result = ouroboros_here("run", "--config", str(config), "--headless")
    assert result.returncode == 2  # a window too small needs a fix
    lines = [line for line in result.stderr.splitlines() if "no session could do" in line]
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert server.requests == []  # refused before the first request (test_start_refusal.py)
    assert re.search(r"take \d+ tokens", lines[0])  # the figures
    assert f"a {WINDOW}-token window" in lines[0] and "model.context_limit" in lines[0]
    assert "SYSTEM_PROMPT.md" in lines[0]


def test_sessions_that_never_get_a_tool_call_through_stop_the_run(tmp_path):
    """Every call fails (a new path each time, so no loop repeats): the brake stops the run
    after three sessions and blames the failing calls, not the window, which is fine."""
    tries = iter(range(1000))

    def flailing(messages):
        return Reply(
            "Trying the same thing again. " * 40,
            [("file_read", {"path": f"nope-{next(tries)}.txt"})],
        )

    with ScriptedServer(flailing, model="scripted-demo", context_length=WINDOW) as server:
        write_demo_project(tmp_path, server.base_url, 1)
        loaded = load_config(
            tmp_path / "ouroboros.toml",
            {"model.context_limit": WINDOW, **NOT_MADE_REAL},
            env={},
            user_file=None,
        )
        assert asyncio.run(run_agent(loaded, RunHooks())) == 3  # paused: stuck
    events = run_events(tmp_path)
    [stuck] = of_type(events, "stuck")
    assert stuck["kind"] == "barren" and stuck["action"] == "pause"
    assert stuck["detail"].startswith(
        "3 sessions in a row ended without one successful tool "
        "call; in the last, every tool call failed"
    )
    assert "window" not in stuck["detail"]
    assert events[-1]["type"] == "run_end" and events[-1]["reason"] == "stuck"
    assert len(of_type(run_events(tmp_path), "session_restart")) == 2


# --- resume recomputes the window from the config, so the user's fix works ------------------


def test_resume_uses_the_context_limit_the_user_set(tmp_path):
    class FailsAfter(RecordingAgent):
        """Works until the server starts refusing (a permanent error ends the run)."""

        def __init__(self, parts, replies):
            super().__init__(parts)
            self.replies = replies

        def __call__(self, messages):
            self.replies -= 1
            return super().__call__(messages) if self.replies >= 0 else Fault("status", 401)

    with ScriptedServer(
        FailsAfter(PARTS, 16), model="scripted-demo", context_length=2500, api_ps="silent"
    ) as small:
        keys = write_demo_project(tmp_path, small.base_url, PARTS)
        flags = {"model.context_limit": 16384, **NOT_MADE_REAL}
        loaded = load_config(tmp_path / "ouroboros.toml", flags, env={}, user_file=None)
        with pytest.raises(RunFailed):
            asyncio.run(run_agent(loaded, RunHooks()))
    detected = of_type(run_events(tmp_path), "context_truncation_detected")
    assert detected and detected[-1]["new_limit"] <= 2500

    # The fix: a server with a bigger window, and model.context_limit set to match.
    with ScriptedServer(RecordingAgent(PARTS), model="scripted-demo", context_length=32768) as big:
        flags = {"model.context_limit": 32768, "model.base_url": big.base_url}
        loaded = load_config(tmp_path / "ouroboros.toml", flags, env={}, user_file=None)
        code = asyncio.run(run_agent(loaded, RunHooks(), resume=True))
    assert code == 0
    events = run_events(tmp_path)
    resumed = of_type(events, "run_resumed")[-1]
    assert resumed["context_limit"] == 32768
    assert resumed["limit_source"] == "model.context_limit from a command-line flag"
    assert all(
        e["context_limit"] == 32768
        for e in of_type(events, "token_usage")
        if e["seq"] > resumed["seq"]
    )
    assert (tmp_path / "workspace/results.txt").read_text() == expected_results(keys)


def test_a_llama_cpp_server_that_only_says_empty_is_asked_for_its_window(tmp_path):
    """No usage in streams, an empty 200 for a prompt over its window (the claim says 16k,
    the server holds 2.5k, and says nothing of it): the probe that tests the claim at the
    first reply is refused with the window named, before any prompt goes over it."""
    with ScriptedServer(
        RecordingAgent(PARTS),
        model="scripted-demo",
        context_length=2500,
        send_usage=False,
        overflow="empty",
        tokenize="llama-cpp-python",
        tokenizer=TOKENIZERS["by-content"],
        api_ps="silent",
    ) as server:
        code, keys = run_task(tmp_path, server, **{"model.context_limit": 16384})
    assert code == 0
    assert (tmp_path / "workspace/results.txt").read_text() == expected_results(keys)
    recovered = of_type(run_events(tmp_path), "context_overflow_recovered")
    assert len(recovered) == 1  # found at the first refusal, and kept
    assert recovered[0]["new_limit"] == 2500
    assert "named this window" in recovered[0]["limit_source"]
    assert server.over_limit == 0


def test_the_limit_says_where_it_was_set(tmp_path):
    with ScriptedServer(RecordingAgent(1), model="scripted-demo", context_length=WINDOW) as server:
        write_demo_project(tmp_path, server.base_url, 1)
        loaded = load_config(
            tmp_path / "ouroboros.toml",
            {},
            env={"OUROBOROS_MODEL_CONTEXT_LIMIT": "4000"},
            user_file=None,
        )
        asyncio.run(run_agent(loaded, RunHooks()))
    start = of_type(run_events(tmp_path), "session_start")[0]
    assert start["context_limit"] == 4000
    assert start["limit_source"] == (
        "model.context_limit from the environment (OUROBOROS_MODEL_CONTEXT_LIMIT)"
    )


def test_a_server_that_refuses_every_prompt_is_given_up_after_three_shrinks(tmp_path):
    """Ollama's nameless 400 for a window smaller than the system prompt itself."""
    with ScriptedServer(
        RecordingAgent(1), model="scripted-demo", context_length=200, overflow="error"
    ) as server:
        write_demo_project(tmp_path, server.base_url, 1)
        loaded = load_config(
            tmp_path / "ouroboros.toml",
            {"model.context_limit": WINDOW, **NOT_MADE_REAL},
            env={},
            user_file=None,
        )
        with pytest.raises(
            RunFailed, match="kept refusing the prompt as too long after 3 attempts"
        ):
            asyncio.run(run_agent(loaded, RunHooks()))
    assert len(server.requests) == 4
    limits = [e["new_limit"] for e in of_type(run_events(tmp_path), "context_overflow_recovered")]
    assert len(limits) == 4 and limits == sorted(limits, reverse=True) and limits[-1] < WINDOW


def test_a_server_restarted_bigger_is_believed_at_the_next_session(tmp_path):
    """The server held 2.5k (the belief came down by truncation, /api/ps silent), then was
    restarted with 16k: the next session re-tests the ceiling and believes the room."""
    with ScriptedServer(
        RecordingAgent(PARTS),
        model="scripted-demo",
        context_length=2500,
        api_ps="silent",
        grows=(10, 16384),
    ) as server:
        code, keys = run_task(tmp_path, server, **{"model.context_limit": 16384})
    assert code == 0
    assert (tmp_path / "workspace/results.txt").read_text() == expected_results(keys)
    events = run_events(tmp_path)
    assert of_type(events, "context_truncation_detected")
    usages = of_type(events, "token_usage")
    assert min(e["context_limit"] for e in usages) <= 2500
    assert usages[-1]["context_limit"] > 0.9 * 16384 or not [
        s for s in of_type(events, "session_start") if s["seq"] > usages[10]["seq"]
    ]
    assert any(
        "working within" in w["message"] and "again" in w["message"]
        for w in of_type(events, "warning")
    )
    # the truncation warning's condition is over: the dashboard takes it down
    truncation = [w for w in of_type(events, "warning") if w.get("condition") == "truncation"]
    cleared = of_type(events, "warning_cleared")
    assert truncation and [c["condition"] for c in cleared] == ["truncation"]
    assert cleared[0]["seq"] > truncation[0]["seq"]
