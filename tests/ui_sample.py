"""A realistic run log for the terminal views' tests: two sessions, masking, a wind-down, a
restart, a failed tool, a retry and a warning, built from the event models and written with
the real EventLog, so the views read what the harness writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ouroboros.config import Config
from ouroboros.store import events as ev
from ouroboros.store.log import EVENTS_FILE, EventLog, runs_dir

RUN_ID = "20250301-101500-ab12"
LIMIT, BUDGET = 8192, 6144

# (text, tool name, arguments, ok, summary, context %) per turn
SESSION_1 = [
    (
        "Reading my notes first.",
        "file_read",
        {"path": "NOTES.md"},
        True,
        "# Notes: parser done, tests next",
        21.4,
    ),
    (
        "Running the test suite.",
        "shell_exec",
        {"command": "pytest -q"},
        False,
        "[exit code 1] 2 failed, 41 passed",
        38.9,
    ),
    (
        "The tokenizer drops trailing spaces; reading it.",
        "file_read",
        {"path": "src/tokenizer.py"},
        True,
        "import re",
        57.2,
    ),
    (
        "Fixing the whitespace rule.",
        "file_write",
        {"path": "src/tokenizer.py", "content": "..."},
        True,
        "wrote 2,310 bytes",
        74.6,
    ),
    (
        "Re-running the tests.",
        "shell_exec",
        {"command": "pytest -q"},
        True,
        "[exit code 0] 43 passed",
        86.1,
    ),
    (
        "Saving my state to NOTES.md.",
        "file_write",
        {"path": "NOTES.md", "content": "..."},
        True,
        "wrote 512 bytes",
        93.5,
    ),
]
SESSION_2 = [
    (
        "Restarted: reading NOTES.md.",
        "file_read",
        {"path": "NOTES.md"},
        True,
        "# Notes: tokenizer fixed, all tests pass",
        34.0,
    ),
    (
        "Next item: the CLI help text.",
        "file_read",
        {"path": "src/cli.py"},
        True,
        "import argparse",
        47.5,
    ),
    (
        "Adding examples to the help.",
        "file_write",
        {"path": "src/cli.py", "content": "..."},
        True,
        "wrote 4,096 bytes",
        61.8,
    ),
]
RESTART_REASON = "context at 95% of the budget after the wind-down"


def config_record() -> dict[str, Any]:
    config = Config().model_dump(mode="json")
    config["model"]["name"] = "qwen3:8b"
    return config


def turn(log: EventLog, number: int, step: tuple, call_id: str) -> None:
    text, name, args, ok, summary, pct = step
    log.turn = number
    arguments = json.dumps(args)
    log.emit(
        ev.Assistant(
            text=text,
            finish_reason="tool_calls",
            tool_calls=[ev.LoggedCall(id=call_id, name=name, arguments=arguments)],
        )
    )
    prompt = round(BUDGET * pct / 100)
    log.emit(
        ev.TokenUsage(
            prompt_tokens=prompt,
            completion_tokens=40 + number,
            total_tokens=prompt + 40 + number,
            context_limit=LIMIT,
            budget=BUDGET,
            context_used_pct=pct,
            source="server",
            reported=prompt,
            cached_tokens=None,
            verdict="whole",
        )
    )
    log.emit(ev.ToolCallEvent(id=call_id, name=name, arguments=arguments))
    log.emit(
        ev.ToolResultEvent(
            id=call_id,
            name=name,
            ok=ok,
            bytes=len(summary) * 40,
            observation=f"obs-{call_id}",
            truncated=False,
            summary=summary,
            duration_ms=120 * number,
        )
    )


def session_start(carried: int) -> ev.SessionStart:
    return ev.SessionStart(
        context_limit=LIMIT,
        limit_source="server /api/show",
        budget=BUDGET,
        carryover_messages=carried,
    )


def sample_resumed(limit_source: str = "server /api/show", **fields: Any) -> ev.RunResumed:
    """The sample run, paused after its nine turns and one restart, resumed."""
    return ev.RunResumed(
        total_turns=9,
        restarts=1,
        torn_line_dropped=False,
        interrupted_tools=[],
        context_limit=LIMIT,
        limit_source=limit_source,
        budget=BUDGET,
        **fields,
    )


def write_sample_run(state_dir: Path, *, ended: bool = True) -> Path:
    """Write the sample run into `state_dir`; returns its events.jsonl. Without `ended`, the
    log stops in the middle of session 2, as a live (or killed) run's would."""
    path = runs_dir(state_dir) / RUN_ID / EVENTS_FILE
    log = EventLog(path)
    log.emit(ev.RunStart(run_id=RUN_ID, version="0.1.0", pid=4242, config=config_record()))
    log.emit(session_start(0))
    for number, step in enumerate(SESSION_1, 1):
        turn(log, number, step, f"call_1_{number}")
        if number == 4:
            log.emit(
                ev.ContextMask(
                    observations_masked=3,
                    total_masked=3,
                    tokens_before=4584,
                    tokens_after=3310,
                    reclaimed_pct=27.8,
                    preflight=False,
                )
            )
        if number == 5:
            log.emit(
                ev.ContextMask(
                    observations_masked=1,
                    total_masked=4,
                    tokens_before=5290,
                    tokens_after=4950,
                    reclaimed_pct=6.4,
                    preflight=False,
                )
            )
        if number == 6:
            log.emit(ev.WindDown(context_used_pct=93.5))
    log.emit(ev.SessionEnd(reason="restart"))
    log.session, log.turn = 2, 0
    log.emit(
        ev.SessionRestart(
            previous_turns=6,
            carryover_messages=7,
            carryover_masked=1,
            carryover_turns_dropped=0,
            reason=RESTART_REASON,
        )
    )
    log.emit(session_start(7))
    for number, step in enumerate(SESSION_2, 1):
        if number == 2:
            log.emit(ev.Retry(attempt=1, delay_secs=2.0, error="server returned 503"))
            log.emit(ev.WarningEvent(message="the server is slow to answer"))
        turn(log, number, step, f"call_2_{number}")
        if not ended and number == 2:
            log.close()
            return path
    log.emit(ev.SessionEnd(reason="max_turns"))
    log.emit(
        ev.RunEnd(
            reason="max_turns", exit_code=0, sessions=2, total_turns=9, restarts=1, resumable=False
        )
    )
    log.close()
    return path
