import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from ouroboros.protocols import ToolResult
from ouroboros.tools import ShellExec
from ouroboros.tools.safety import blocked_by, shell_environment
from tests.helpers import running

Events = list[dict[str, Any]]


@pytest.fixture
def events() -> Events:
    return []


def shell(
    workspace: Path,
    events: Events,
    *,
    timeout_secs: float = 30,
    max_output_bytes: int = 10_000,
    blocked_patterns: list[str] | None = None,
    secret_env_names: list[str] | None = None,
) -> ShellExec:
    return ShellExec(
        workspace,
        timeout_secs=timeout_secs,
        max_output_bytes=max_output_bytes,
        blocked_patterns=blocked_patterns or [],
        secret_env_names=secret_env_names or [],
        on_security=events.append,
    )


def run(tool: ShellExec, command: str) -> ToolResult:
    return asyncio.run(tool.run({"command": command}))


def gone_soon(pid: int, within_secs: float = 10.0) -> bool:
    deadline = time.monotonic() + within_secs
    while time.monotonic() < deadline:
        if not running(pid):
            return True
        time.sleep(0.05)
    return False


def test_runs_in_the_workspace_and_reports_the_exit_code(workspace: Path, events: Events) -> None:
    result = run(shell(workspace, events), "pwd; echo oops >&2; exit 3")
    assert result.content == f"{workspace.resolve()}\noops\n[exit code 3]"
    assert not result.ok
    assert result.meta == {
        "command": "pwd; echo oops >&2; exit 3",
        "exit_code": 3,
        "timed_out": False,
        "bytes": len(f"{workspace.resolve()}\noops\n"),
        "dropped_bytes": 0,
    }


def test_success_is_ok_and_stdin_is_empty(workspace: Path, events: Events) -> None:
    result = run(shell(workspace, events), "read line; echo read=$?")
    assert result.ok
    assert result.content == "read=1\n[exit code 0]"


def test_timeout_kills_the_whole_process_group(workspace: Path, events: Events) -> None:
    command = "sleep 100 & echo $! > bg.pid; sleep 30; touch waited_out"
    result = run(shell(workspace, events, timeout_secs=1), command)

    assert result.content.endswith("[timed out after 1s; process group killed]")
    assert not result.ok
    assert result.meta["timed_out"] is True
    assert result.meta["exit_code"] is None
    assert not (workspace / "waited_out").exists()  # killed, not waited for
    grandchild = int((workspace / "bg.pid").read_text())
    assert gone_soon(grandchild)


def test_background_child_holding_the_output_is_killed_after_the_shell_exits(
    workspace: Path, events: Events
) -> None:
    tool = shell(workspace, events, timeout_secs=60)
    result = run(tool, "sleep 100 & echo $! > bg.pid; echo started")
    assert result.ok  # not timed out: the background child was not waited for
    assert result.content.startswith("started\n[a background process kept the output open")
    assert result.content.endswith("[exit code 0]")
    assert gone_soon(int((workspace / "bg.pid").read_text()))


def test_background_child_with_redirected_output_outlives_the_call(
    workspace: Path, events: Events
) -> None:
    result = run(shell(workspace, events), "sleep 100 > /dev/null 2>&1 & echo $! > bg.pid")
    server = int((workspace / "bg.pid").read_text())
    try:
        assert result.content == "[exit code 0]"
        assert running(server)
    finally:
        os.kill(server, signal.SIGKILL)


def test_output_beyond_the_cap_is_drained_and_counted(workspace: Path, events: Events) -> None:
    tool = shell(workspace, events, max_output_bytes=1000)
    result = run(tool, "head -c 5000000 /dev/zero | tr '\\0' x")
    assert result.ok
    assert result.content.startswith("x" * 1000 + "\n[output truncated: 4999000 more bytes dropped")
    assert "x" * 1001 not in result.content
    assert result.content.endswith("[exit code 0]")
    assert result.meta["bytes"] == 1000
    assert result.meta["dropped_bytes"] == 4_999_000


def test_secrets_are_not_in_the_environment(
    workspace: Path, events: Events, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_KEY", "sk-secret")
    monkeypatch.setenv("OUROBOROS_TOKEN", "harness-only")
    monkeypatch.setenv("VISIBLE", "shown")
    tool = shell(workspace, events, secret_env_names=["MY_KEY"])
    result = run(tool, 'echo "key=$MY_KEY token=$OUROBOROS_TOKEN visible=$VISIBLE"')
    assert result.content == "key= token= visible=shown\n[exit code 0]"


def test_a_command_cannot_speak_to_the_supervisor_for_the_harness(
    workspace: Path, events: Events, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under systemd (Type=notify) a command that could write to NOTIFY_SOCKET could say
    READY=1 or WATCHDOG=1 for a hung harness."""
    monkeypatch.setenv("NOTIFY_SOCKET", "@ouroboros-test")
    monkeypatch.setenv("WATCHDOG_USEC", "60000000")
    tool = shell(workspace, events)
    result = run(tool, 'echo "socket=$NOTIFY_SOCKET watchdog=$WATCHDOG_USEC"')
    assert result.content == "socket= watchdog=\n[exit code 0]"


def test_blocked_command_is_not_run_and_is_reported(workspace: Path, events: Events) -> None:
    tool = shell(workspace, events, blocked_patterns=[r"\brm\s+-rf\b", r"\btouch\b"])
    result = run(tool, "touch made.txt")
    assert not result.ok
    assert result.content.startswith(r"error: command blocked by safety pattern '\btouch\b'")
    assert not (workspace / "made.txt").exists()
    assert events == [
        {
            "kind": "blocked_command",
            "tool": "shell_exec",
            "command": "touch made.txt",
            "pattern": r"\btouch\b",
        }
    ]


def test_empty_command_is_an_error(workspace: Path, events: Events) -> None:
    result = run(shell(workspace, events), "   ")
    assert not result.ok
    assert result.content.startswith("error: empty command")


def test_a_command_that_is_not_one_string_is_refused_unrun(workspace: Path, events: Events) -> None:
    tool = shell(workspace, events)
    as_list = asyncio.run(tool.run({"command": ["touch", "made.txt"]}))
    assert (as_list.ok, as_list.content) == (
        False,
        "error: shell_exec: argument 'command' must be string, got array",
    )
    misnamed = asyncio.run(tool.run({"cmd": "touch made.txt"}))
    assert misnamed.content.splitlines() == [
        "error: shell_exec: missing required argument 'command' (string)",
        "error: shell_exec: unknown argument 'cmd'; the arguments are: command",
    ]
    assert not (workspace / "made.txt").exists()


def test_blocked_by_returns_the_first_match_and_skips_invalid_patterns() -> None:
    patterns = ["(unclosed", r"push\s+--force", "git"]
    assert blocked_by("git push --force", patterns) == r"push\s+--force"
    assert blocked_by("ls -la", ["(unclosed", "rm"]) is None


def test_shell_environment_drops_named_secrets_and_harness_variables() -> None:
    base = {"PATH": "/bin", "API_KEY": "k", "OUROBOROS_RUN": "1", "HOME": "/h"}
    assert shell_environment(base, ["API_KEY"]) == {"PATH": "/bin", "HOME": "/h"}
    assert base["API_KEY"] == "k"
