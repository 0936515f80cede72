"""A reply that takes too long, or grows too large, is a failed attempt with a clear reason,
retried like a dropped stream: the real `ouroboros run` against loopback servers that trickle
tokens, send only keep-alive comments, or stream megabytes past max_tokens (issue 10, item 2).
"""

from __future__ import annotations

import pytest

from tests.faults.servers import FAULTS, run_against, start
from tests.helpers import of_type, run_events


def survived_with_one_retry(project, result) -> dict:
    """The run went on after the failed attempt and ended normally; the first retry event."""
    assert result.returncode == 3, result.stderr + result.stdout
    assert "Traceback" not in result.stderr
    events = run_events(project)
    assert of_type(events, "run_end")[-1]["reason"] == "max_turns"
    assert len(of_type(events, "assistant")) == 1  # the failed attempt left no turn behind
    retries = of_type(events, "retry")
    assert retries, result.stdout
    return retries[0]


@pytest.mark.parametrize(
    "fault, bound, reason",
    [
        ("trickle", 1.0, "the reply took longer than 1 s (model.request_timeout_secs)"),
        (
            "keepalive_first",
            0.5,
            "no data for 0.5 s after the request (model.first_token_timeout_secs;"
            " keep-alive comments do not count)",
        ),
        (
            "keepalive_idle",
            0.5,
            "no data for 0.5 s in the middle of the reply "
            "(model.idle_timeout_secs; keep-alive comments do not count)",
        ),
    ],
    ids=["trickle", "pings-first", "pings-mid-reply"],
)
def test_a_reply_that_never_ends_is_cut_at_its_bound_and_retried(tmp_path, fault, bound, reason):
    with start(fault) as server:
        result = run_against(tmp_path, server, FAULTS[fault].model)

    retry = survived_with_one_retry(tmp_path, result)
    assert reason in retry["error"]
    assert any(
        line.split(" t1 ", 1)[-1].startswith("retry 1 in ") and reason in line
        for line in result.stdout.splitlines()
    ), result.stdout
    # The held attempt was given up at its bound, not when the server stopped (60 s on).
    first, second = server.chat_requests()[:2]
    assert second["time"] - first["time"] < 30


def test_a_reply_past_max_tokens_is_cut_at_its_size_bound_and_never_stored(tmp_path):
    with start("huge") as server:  # 8 MB of text, where max_output_tokens is 64
        result = run_against(tmp_path, server, FAULTS["huge"].model)

    retry = survived_with_one_retry(tmp_path, result)
    assert "the reply exceeded 1.03 MB (model.max_reply_bytes)" in retry["error"]
    run_dir = next((tmp_path / ".ouroboros" / "runs").iterdir())
    assert (run_dir / "events.jsonl").stat().st_size < 100_000
    assert (run_dir / "state.json").stat().st_size < 100_000
