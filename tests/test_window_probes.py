"""Every ceiling is a belief with an expiry (issue 36, items 3-7): the servers that hold
another window than the harness believes, or count in other units than they cut at, met by
probes sized under the window tested.

Each test runs the demo task against a scripted server over loopback and asserts what a
person would notice: the run finishes, no part is redone, and at most two prompts (the
ones that reveal a change nobody announced) go over the server's real window.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter

import pytest

from ouroboros.config import load_config
from ouroboros.demo import RecordingAgent, expected_results, make_workspace, write_demo_project
from ouroboros.loop.runner import RunHooks, run_agent
from ouroboros.testing import ScriptedServer
from ouroboros.testing.tokenizer import TOKENIZERS
from tests.helpers import of_type, run_events

PARTS = 8
# What a longer mission adds to the system prompt (~2,500 tokens): with the data files of
# the benchmark (~2,300 tokens each) a fresh session fits the window only in the units the
# server counts in, not in those it counted the system prompt in before.
MISSION = "Check each result, note it down. " * 283
BENCHMARK_FILE_CHARS = 10110


def run_task(tmp_path, server, claim, parts=PARTS, mission="", chars=0, **flags):
    keys = write_demo_project(tmp_path, server.base_url, parts)
    if chars:  # data files of this many characters each
        keys = make_workspace(tmp_path / "workspace", parts, chars_per_part=chars)
    prompt = tmp_path / "SYSTEM_PROMPT.md"
    prompt.write_text(prompt.read_text() + mission)
    loaded = load_config(
        tmp_path / "ouroboros.toml",
        {
            "model.context_limit": claim,
            "safety.sandbox": "off",
            # the server holding less than the claim is the point here
            "model.ensure_window": False,
            **flags,
        },
        env={},
        user_file=None,
    )
    code = asyncio.run(run_agent(loaded, RunHooks()))
    return code, keys


def assert_done(tmp_path, code, keys):
    assert code == 0
    assert (tmp_path / "workspace/results.txt").read_text() == expected_results(keys)
    reads = Counter(
        m.group(1)
        for e in of_type(run_events(tmp_path), "tool_call")
        if e["name"] == "file_read" and (m := re.search(r"part_(\d+)", e["arguments"]))
    )
    assert not [part for part, n in reads.items() if n > 1], "parts redone"


def limits(tmp_path):
    return [e["context_limit"] for e in of_type(run_events(tmp_path), "token_usage")]


def test_counts_gone_low_after_the_first_do_not_stop_the_run(tmp_path):
    """Item 3: from the second request on the server counts 40 % low, so the counts fall
    while the prompt grows, as if it cut at the first count. Today the belief came down to
    that count and the run stopped (exit 2) after four requests. A probe under the claim is
    counted far above it, where the server really cuts in its units; the ledger, which
    measured the system prompt in the old units, follows the new ones, so the fresh
    sessions fit."""
    with ScriptedServer(
        RecordingAgent(PARTS),
        model="scripted-demo",
        context_length=8192,
        tokenizer=TOKENIZERS["bpe-bytes"],
        api_ps="silent",
        miscount=(0.6, 2),
    ) as server:
        code, keys = run_task(
            tmp_path,
            server,
            8192,
            mission=MISSION,
            chars=BENCHMARK_FILE_CHARS,
            **{"model.max_output_tokens": 2048},
        )
    assert_done(tmp_path, code, keys)
    assert server.over_limit == 0
    assert min(limits(tmp_path)) > 4000  # 0.6 x 8192 = 4915 tokens as it counts them


@pytest.mark.parametrize("api_ps", ["honest", "silent"])
def test_a_server_counting_low_gets_no_more_than_two_prompts_over_its_window(tmp_path, api_ps):
    """Item 4: a server that counts 40 % low cuts at its window while its counts say 60 %
    of it. /api/ps telling the window (in its own units) overrode the evidence at every
    session start; now the evidence holds until a probe re-tests it."""
    with ScriptedServer(
        RecordingAgent(PARTS),
        model="scripted-demo",
        context_length=4096,
        api_ps=api_ps,
        miscount=(0.6, 1),
    ) as server:
        code, keys = run_task(tmp_path, server, 4096)
    assert_done(tmp_path, code, keys)
    assert server.over_limit <= 2
    starts = [e["context_limit"] for e in of_type(run_events(tmp_path), "session_start")]
    assert all(limit <= 0.6 * 4096 * 1.02 for limit in starts[1:])


@pytest.mark.parametrize("api_ps", ["honest", "silent"])
def test_a_reload_to_a_smaller_window_mid_session_is_caught_at_once(tmp_path, api_ps):
    """Item 5: the server is restarted with half the window in the middle of a session. It
    is caught at the first count short of the ledger (Ollama's /api/ps asked at once, or a
    probe), at the size it cuts at now, not at the largest count taken before."""
    with ScriptedServer(
        RecordingAgent(PARTS),
        model="scripted-demo",
        context_length=8192,
        api_ps=api_ps,
        grows=(10, 4096),
    ) as server:
        code, keys = run_task(tmp_path, server, 8192)
    assert_done(tmp_path, code, keys)
    assert server.over_limit <= 2
    after = limits(tmp_path)[12:]
    assert after and max(after) <= 4096


def test_a_reload_to_half_the_window_right_after_masking_is_caught_at_its_first_count(tmp_path):
    """The benchmark's `shrinks 8192->4096 ps-silent`: the reload lands just after a masking
    round, when no earlier count compares, and a count short of the ledger had already had
    its probe this session. Counted at half the ledger's figure (the server dropped whole
    messages from the front), it is doubted again at once: one prompt over, not three."""
    with ScriptedServer(
        RecordingAgent(12),
        model="scripted-demo",
        context_length=8192,
        tokenizer=TOKENIZERS["bpe-bytes"],
        api_ps="silent",
        grows=(20, 4096),
    ) as server:
        code, keys = run_task(
            tmp_path,
            server,
            8192,
            parts=12,
            chars=BENCHMARK_FILE_CHARS,
            **{"model.max_output_tokens": 2048},
        )
    assert_done(tmp_path, code, keys)
    assert server.over_limit <= 1
    # the case it is about: the count that revealed the reload was far short of the ledger
    # (the server dropped whole messages), in a session that had masked before it
    events = run_events(tmp_path)
    found = next(i for i, e in enumerate(events) if e["type"] == "context_truncation_detected")
    count = next(e for e in events[found:] if e["type"] == "token_usage")
    assert count["reported"] < 0.55 * count["estimated"]
    began = max(i for i, e in enumerate(events[:found]) if e["type"] == "session_start")
    assert any(e["type"] == "context_mask" for e in events[began:found])


@pytest.mark.parametrize("overflow", ["named", "error"])
def test_a_ceiling_from_a_refusal_is_re_tested_after_the_server_grew(tmp_path, overflow):
    """Item 6: a refusal naming the window (vLLM's 400) or not (Ollama's) set the belief;
    the server was then restarted with four times the window. The ceiling is re-tested at
    session starts with a probe under the claim, never over it, and the room believed."""
    with ScriptedServer(
        RecordingAgent(PARTS),
        model="scripted-demo",
        context_length=4096,
        api_ps="silent",
        overflow=overflow,
        grows=(12, 16384),
    ) as server:
        code, keys = run_task(tmp_path, server, 16384)
    assert_done(tmp_path, code, keys)
    assert max(limits(tmp_path)[12:]) >= 0.9 * 16384
    assert server.over_limit <= 2


def test_silent_truncation_from_the_start_is_caught_before_a_prompt_is_cut(tmp_path):
    """Item 7: the config claims 16k, the server holds 2.5k, cuts the front of longer
    prompts and says nothing of its window. The claim is tested at the first reply, and no
    prompt is cut (the cut front held the agent's progress read: parts were redone)."""
    with ScriptedServer(
        RecordingAgent(PARTS),
        model="scripted-demo",
        context_length=2500,
        tokenizer=TOKENIZERS["bpe-bytes"],
        api_ps="silent",
    ) as server:
        code, keys = run_task(tmp_path, server, 16384)
    assert_done(tmp_path, code, keys)
    assert server.over_limit == 0
    assert all(limit <= 2500 for limit in limits(tmp_path))
