"""Crashing a real `ouroboros` process on purpose, and checking what it left behind.

The brain decides where the harness is when the test kills it: it can hold one shell command
(the command touches a marker file, then sleeps) or one model request (a slow answer), and it
tags every shell command with a unique token appended to `executions.log` in the project
directory, so that the test can count how many times each command really ran.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from ouroboros.demo import DEMO_PROMPT, RecordingAgent, expected_results, make_workspace
from ouroboros.protocols import Message
from ouroboros.store.log import list_runs
from ouroboros.store.state_file import STATE_FILE
from ouroboros.testing import Fault, Reply
from tests.helpers import Forked, clean_env, make_project, ouroboros_forked, run_events

TAG = re.compile(r"^echo T\d+ >> \.\./executions\.log; (?:echo \$\$ > \.\./held_tool; sleep 30; )?")
WAIT_SECS = 45  # below the per-test timeout (pyproject.toml): a wait fails saying what for


class CountingAgent(RecordingAgent):
    """The demo agent, with every shell command tagged, and optionally one held.

    hold_tool_at: the Nth shell command writes its shell's pid to ../held_tool, then sleeps.
    hold_request_at: the Nth model request is answered only after 120 s (request_held is set
    when it arrives).
    inject_at: {call number: faults} injected into the server when the brain is called.
    """

    def __init__(
        self,
        parts: int,
        *,
        hold_tool_at: int | None = None,
        hold_request_at: int | None = None,
        inject_at: dict[int, list[Fault]] | None = None,
    ) -> None:
        super().__init__(parts)
        self.hold_tool_at = hold_tool_at
        self.hold_request_at = hold_request_at
        self.inject_at = inject_at or {}
        self.server: Any = None
        self.calls = 0
        self.shell_commands = 0
        self.request_held = threading.Event()

    def __call__(self, messages: list[Message]) -> Reply:
        self.calls += 1
        if self.calls in self.inject_at:
            self.server.inject(*self.inject_at[self.calls])
        if self.calls == self.hold_request_at:
            self.request_held.set()
            return Fault("slow", seconds=120)  # type: ignore[return-value]
        reply = super().__call__(messages)
        return Reply(reply.text, [self.tag(name, args) for name, args in reply.tool_calls])

    def tag(self, name: str, args: Any) -> tuple[str, Any]:
        if name != "shell_exec":
            return name, args
        self.shell_commands += 1
        hold = (
            "echo $$ > ../held_tool; sleep 30; " if self.shell_commands == self.hold_tool_at else ""
        )
        raw = TAG.sub("", args["command"])  # a redo of an interrupted call gets a new tag
        return name, {"command": f"echo T{self.shell_commands} >> ../executions.log; {hold}{raw}"}


def demo_project(
    root: Path,
    base_url: str,
    parts: int,
    *,
    max_turns: int,
    chars_per_part: int = 300,
    **tables: dict[str, Any],
) -> tuple[Path, str]:
    """A project for the demo task; returns its config and the results.txt it must produce."""
    agent = {"max_turns": max_turns, **tables.pop("agent", {})}
    # The bookkeeping (executions.log, held_tool) is written beside the workspace, where the
    # sandbox lets no command write: these tests are about resuming, not confinement.
    tables["safety"] = {"sandbox": "off", **tables.get("safety", {})}
    config = make_project(root, base_url, prompt=DEMO_PROMPT, agent=agent, **tables)
    keys = make_workspace(root / "workspace", parts, chars_per_part=chars_per_part)
    return config, expected_results(keys)


def start(*args: str, root: Path) -> subprocess.Popen[str]:
    """`ouroboros ARGS` in the background, its output appended to out.txt and err.txt in
    `root` (files: a held command may outlive it), as start_forked appends it."""
    with (root / "out.txt").open("a") as out, (root / "err.txt").open("a") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "ouroboros", *args],
            env=clean_env(),
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            text=True,
        )


def start_forked(*args: str, root: Path) -> Forked:
    """As `start`, in a process forked from the test's (tests.helpers.ouroboros_forked): a real
    process to kill, without an interpreter to start."""
    return ouroboros_forked(*args, out=root / "out.txt", err=root / "err.txt")


def wait_for(
    condition: Callable[[], Any],
    what: str,
    process: subprocess.Popen | None = None,
    timeout: float = WAIT_SECS,
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the process exited ({process.returncode}) before {what}")
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


def kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait(timeout=WAIT_SECS)


def kill_held_tool(root: Path) -> None:
    """The held shell command runs in its own process group and outlives a killed harness."""
    try:
        pid = int((root / "held_tool").read_text())
        os.killpg(pid, signal.SIGKILL)
    except (OSError, ValueError):
        pass


def event_lines(root: Path) -> int:
    runs = list_runs(root / ".ouroboros")
    if not runs:
        return 0
    path = root / ".ouroboros" / "runs" / runs[-1] / "events.jsonl"
    return path.read_bytes().count(b"\n") if path.exists() else 0


def snapshot(root: Path) -> dict[str, Any]:
    """The state as saved (state.json: `seq`, `state`)."""
    run = root / ".ouroboros" / "runs" / list_runs(root / ".ouroboros")[-1]
    return json.loads((run / STATE_FILE).read_text())


def executions(root: Path) -> Counter[str]:
    path = root / "executions.log"
    return Counter(path.read_text().split()) if path.exists() else Counter()


def tool_messages(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m["role"] == "tool"]


def sent_from(server: Any, first: int) -> list[list[Message]]:
    """The conversations sent in chat requests from number `first` on. A request the killed
    harness had only begun to send reaches the server with an empty body: it holds none."""
    return [r["messages"] for r in server.requests[first:] if "messages" in r]


def check_conversation(messages: list[Message]) -> None:
    """Every tool call answered exactly once, right after it; no reply recorded twice."""
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        assert messages[i + 1 : i + 2] == [] or messages[i + 1]["role"] != "assistant", (
            f"two assistant messages in a row at {i}"
        )
        ids = [c["id"] for c in message.get("tool_calls") or []]
        answers = [m.get("tool_call_id") for m in messages[i + 1 : i + 1 + len(ids)]]
        assert answers == ids, f"tool calls {ids} answered by {answers}"
    answered = Counter(m["tool_call_id"] for m in messages if m["role"] == "tool")
    assert all(n == 1 for n in answered.values()), answered.most_common(3)
    texts = [m.get("content") for m in messages if m["role"] == "assistant"]
    assert not any("will not arrive whole" in (t or "") for t in texts)


def check_log(root: Path) -> list[dict[str, Any]]:
    """The log is whole, numbered without gaps, and no tool call was started twice."""
    events = run_events(root)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    sessions = [e["session"] for e in events]
    assert sessions == sorted(sessions), "the session number went backwards"
    started = Counter(e["id"] for e in events if e["type"] == "tool_call")
    assert all(n == 1 for n in started.values()), started.most_common(3)
    return events


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True
