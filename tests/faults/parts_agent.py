"""A scripted agent whose work shows whether any was lost or done twice, and the real
`ouroboros` process to run it in, for the stop and resume tests.

The agent appends `part_N` to `parts.txt`, one part a turn, with a command that is not
idempotent (`echo part_N >> parts.txt`): a step run twice leaves a line twice, a step lost
leaves a gap. Like a model, it decides only from the conversation it is sent: the next part
is one past the last one whose command finished. It can hold one step (`sleep 30` before the
append, its shell's pid in `held.pid`), go idle after some part (replies without a tool
call) until told to go on, and call task_complete once all parts are done. The last user
instruction `do parts up to N` raises how many parts there are.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from ouroboros.protocols import Message
from ouroboros.testing import Reply
from tests import crash_helpers
from tests.crash_helpers import wait_for
from tests.helpers import Forked, make_project

STEP = re.compile(r"echo (part_\d+) >> parts\.txt")
TARGET = re.compile(r"do parts up to (\d+)")
HOLD = "echo $$ > held.pid; sleep 30; "


class PartsAgent:
    """Callable as a ScriptedServer brain."""

    def __init__(
        self, parts: int, *, hold_part: int | None = None, idle_after: int | None = None
    ) -> None:
        self.parts = parts
        self.hold_part = hold_part
        self.idle_after = idle_after

    def __call__(self, messages: list[Message]) -> Reply:
        done, interrupted = progress(messages)
        target = self.target(messages)
        next_part = done + 1
        if self.idle_after is not None and done == self.idle_after and not told_to_go_on(messages):
            return Reply(f"Parts 1 to {done} are done; I think that is all for now.")
        if next_part > target:
            summary = f"parts 1 to {target} are in parts.txt"
            return Reply("All done.", [("task_complete", {"summary": summary})])
        hold = HOLD if next_part == self.hold_part and not interrupted else ""
        command = f"{hold}echo part_{next_part} >> parts.txt"
        return Reply(f"Part {next_part}.", [("shell_exec", {"command": command})])

    def target(self, messages: list[Message]) -> int:
        for message in reversed(messages):
            if message["role"] == "user" and (found := TARGET.search(message["content"] or "")):
                return int(found.group(1))
        return self.parts


def progress(messages: list[Message]) -> tuple[int, bool]:
    """The last part whose command finished, and whether the newest step was interrupted."""
    results = {
        m.get("tool_call_id"): m.get("content") or "" for m in messages if m["role"] == "tool"
    }
    done, interrupted = 0, False
    for message in messages:
        for call in message.get("tool_calls") or ():
            step = STEP.search(json.loads(call["function"]["arguments"]).get("command", ""))
            result = results.get(call["id"])
            if step is None or result is None:
                continue
            interrupted = result.startswith("[interrupted")
            if "[exit code 0]" in result:
                done = int(step.group(1).removeprefix("part_"))
    return done, interrupted


def told_to_go_on(messages: list[Message]) -> bool:
    return any(m["role"] == "user" and "go on" in (m["content"] or "").lower() for m in messages)


def expected_parts(count: int) -> str:
    return "".join(f"part_{n}\n" for n in range(1, count + 1))


def parts_project(root: Path, base_url: str, **agent: Any) -> Path:
    """A project whose agent runs for ever unless a test says otherwise."""
    return make_project(
        root, base_url, model={"context_limit": 16384, "max_retry_secs": 600}, agent=agent
    )


def start(root: Path, *args: str) -> subprocess.Popen[str]:
    """`ouroboros ARGS --headless` in the background, its output in files in `root`."""
    return crash_helpers.start(*args, "--headless", root=root)


def start_forked(root: Path, *args: str) -> Forked:
    """As `start`, in a process forked from the test's (tests.helpers.ouroboros_forked): a real
    process to signal, without an interpreter to start."""
    return crash_helpers.start_forked(*args, "--headless", root=root)


def held_pid(root: Path, process: subprocess.Popen[str]) -> int:
    """Wait until the held step's shell has written its pid (`hold_part`), and return it."""
    held = root / "workspace" / "held.pid"
    return int(
        wait_for(lambda: held.exists() and held.read_text().strip(), "the held tool call", process)
    )


def stop_and_time(
    process: subprocess.Popen[str], *signals: signal.Signals, gap: float = 0.0
) -> float:
    """Send the signals (`gap` seconds apart); seconds from the first until the exit."""
    started = time.monotonic()
    for index, sig in enumerate(signals):
        if index and gap:
            time.sleep(gap)
        if process.poll() is None:
            process.send_signal(sig)
    process.wait(timeout=30)
    return time.monotonic() - started


def log_text(root: Path) -> str:
    return (root / "out.txt").read_text() + (root / "err.txt").read_text()
