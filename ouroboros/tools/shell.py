"""The shell_exec tool: one `/bin/sh -c` command in the workspace.

The command runs in the run's sandbox (see sandbox/policy.py: on Linux with Landlock it reads the
system and writes only the workspace and a private temp dir), in its own session and process
group, with the harness's secrets removed from its environment and a marker naming its
workspace added (see sandbox/reaper.py: tool processes die with the harness). On timeout the whole
group is killed, so background children die too. Output beyond the cap is read and discarded
so the command never blocks on a full pipe.

A group is reported killed only once none of it is left (KILL_WAIT_SECS at most: a fork bomb's
hundreds of processes take a while to die, and are killed again while any still runs); one
that is not gone by then is reported as such, with how many of its processes are left.

A background job whose output is redirected (`server > server.log 2>&1 &`) outlives the call.
One that keeps the output pipe open after the shell exits gets OUTPUT_GRACE_SECS to finish,
then its process group is killed: nothing would be left to read what it writes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from pydantic import Field

from ouroboros.protocols import ToolResult, holds_stand_in
from ouroboros.sandbox.policy import Sandbox
from ouroboros.sandbox.reaper import MARKER, group_left, workspace_tag
from ouroboros.tools.arguments import ModelTool, ToolArguments
from ouroboros.tools.safety import SecurityHook, blocked_by, shell_environment

READ_CHUNK_BYTES = 65536
OUTPUT_GRACE_SECS = 1.0
SETTLE_SECS = 2.0  # after the kill: how long to wait for the output pipe to close
KILL_WAIT_SECS = 10.0  # after the kill: how long the group gets to be gone
MAX_EXIT_POLL_SECS = 0.1


STAND_IN_COMMAND = (
    "error: the command holds what the history keeps of an earlier call in place of its "
    "text (a `[... N more characters, not kept in the history]` line), not a command; it was "
    "not run. Write the whole command out."
)


@dataclass
class CappedOutput:
    """Keeps the first `limit` bytes of a stream and counts the rest."""

    limit: int
    kept: bytearray = field(default_factory=bytearray)
    dropped: int = 0

    def add(self, chunk: bytes) -> None:
        room = max(0, self.limit - len(self.kept))
        self.kept += chunk[:room]
        self.dropped += max(0, len(chunk) - room)


@dataclass(frozen=True)
class Outcome:
    """How a command ended. `exit_code` is None when it timed out."""

    exit_code: int | None
    timed_out: bool = False
    lingering: bool = False  # a background process held the output open after the shell exited
    left: int = 0  # processes of its group not gone KILL_WAIT_SECS after it was killed


def render(text: str, dropped: int, outcome: Outcome, timeout_secs: float) -> str:
    """The model's view of a finished command: its output, notes, then the final status line."""
    lines = [text.removesuffix("\n")] if text else []
    if dropped:
        lines.append(
            f"[output truncated: {dropped} more bytes dropped; redirect the output to a file "
            "and read it with file_read offset/limit, or filter it with head, tail or grep]"
        )
    if outcome.lingering:
        lines.append(
            "[a background process kept the output open after the shell exited, so its process "
            f"group was {killed(outcome)}; redirect background output, e.g. "
            "`cmd > cmd.log 2>&1 &`]"
        )
    lines.append(status_line(outcome, timeout_secs))
    return "\n".join(lines)


def killed(outcome: Outcome) -> str:
    """What became of the killed group, in words."""
    if not outcome.left:
        return "killed"
    return (
        f"sent SIGKILL, but {outcome.left} of its processes were still there "
        f"{KILL_WAIT_SECS:g}s later"
    )


def status_line(outcome: Outcome, timeout_secs: float) -> str:
    if outcome.timed_out:
        return f"[timed out after {timeout_secs:g}s; process group {killed(outcome)}]"
    code = outcome.exit_code
    if code is not None and code < 0:
        return f"[exit code {code}: killed by {signal_name(-code)}]"
    return f"[exit code {code}]"


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # gone; or none of it is ours to kill
        pass


async def kill_until_gone(
    pgid: int, settle: Callable[[], None] = lambda: None, wait_secs: float = KILL_WAIT_SECS
) -> int:
    """Kill the group led by the shell `pgid`, again while any of it is left (`settle` reaps
    the dead the harness adopted), until none is or `wait_secs` passed: how many are left
    (0: the group is gone)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_secs
    delay = 0.001
    while True:
        kill_group(pgid)
        settle()
        left = group_left(pgid, keep=pgid)
        if not left or loop.time() >= deadline:
            return len(left)
        await asyncio.sleep(delay)
        delay = min(delay * 2, MAX_EXIT_POLL_SECS)


async def _drain(stream: asyncio.StreamReader, output: CappedOutput) -> None:
    while chunk := await stream.read(READ_CHUNK_BYTES):
        output.add(chunk)


@dataclass
class Running:
    """A started command as the supervisor sees it. The sandbox starts it from a thread of its
    own, so it is a subprocess.Popen whose output pipe is read through the event loop."""

    popen: subprocess.Popen[bytes]
    stdout: asyncio.StreamReader
    transport: asyncio.ReadTransport

    @classmethod
    async def start(
        cls, sandbox: Sandbox, command: str, *, cwd: Path, env: dict[str, str]
    ) -> Running:
        popen = sandbox.spawn(
            ["/bin/sh", "-c", command],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        reader = asyncio.StreamReader()
        transport, _ = await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), popen.stdout
        )
        return cls(popen, reader, transport)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        """Set as soon as the shell itself has exited, whoever still holds its output pipe.
        The shell is left a zombie (not reaped) until `reap`: its pid, and so its process
        group's number, cannot be given to another process while the group may be killed."""
        if self.popen.returncode is not None:
            return self.popen.returncode
        try:
            info = os.waitid(os.P_PID, self.popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return self.popen.poll()
        if info is None:
            return None
        killed = info.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
        return -info.si_status if killed else info.si_status

    async def wait(self) -> int:
        """The shell's exit code, as soon as it exits: a pidfd becomes readable then (no
        polling delay); where there is none, polled at growing intervals."""
        if (code := self.returncode) is not None:
            return code
        try:
            pidfd = os.pidfd_open(self.popen.pid)
        except (AttributeError, OSError):
            return await self._poll()
        loop = asyncio.get_running_loop()
        exited = loop.create_future()
        try:
            loop.add_reader(pidfd, lambda: exited.done() or exited.set_result(None))
            await exited
        finally:
            loop.remove_reader(pidfd)
            os.close(pidfd)
        return await self._poll()

    async def _poll(self) -> int:
        delay = 0.001
        while (code := self.returncode) is None:
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_EXIT_POLL_SECS)
        return code

    def reap(self) -> None:
        """Reap the exited shell, once its group is dealt with."""
        self.popen.wait()

    def stop_listening(self) -> None:
        self.transport.close()


async def supervise(
    process: Running,
    output: CappedOutput,
    timeout_secs: float,
    settle: Callable[[], None] = lambda: None,
) -> Outcome:
    """Collect the output of `process` until the shell exits and its output closes, or until
    the timeout; any of its process group still running then is killed (see
    kill_until_gone; `settle` reaps the orphans the harness adopted)."""
    reader = asyncio.create_task(_drain(process.stdout, output))
    left = 0
    try:
        try:
            await asyncio.wait_for(process.wait(), timeout_secs)
        except TimeoutError:
            outcome = Outcome(exit_code=None, timed_out=True)
        else:
            done, _ = await asyncio.wait({reader}, timeout=OUTPUT_GRACE_SECS)
            outcome = Outcome(exit_code=process.returncode, lingering=not done)
    finally:
        if process.returncode is None or not reader.done():
            left = await kill_until_gone(process.pid, settle)
        await _settle(process, reader)
    return replace(outcome, left=left)


async def _settle(process: Running, reader: asyncio.Task[None]) -> None:
    done, _ = await asyncio.wait({reader}, timeout=SETTLE_SECS)
    if not done:
        # A process that left the group (setsid) still holds the pipe: stop listening to it.
        reader.cancel()
        await asyncio.wait({reader})
    process.stop_listening()
    await process.wait()
    process.reap()


class ShellArguments(ToolArguments):
    """shell_exec's argument: one command line for /bin/sh."""

    command: str = Field(description="The shell command.")


class ShellExec(ModelTool[ShellArguments]):
    """Run a shell command in the workspace.

    ShellExec(workspace, timeout_secs=120, max_output_bytes=50_000, blocked_patterns=[],
              secret_env_names=["OPENAI_API_KEY"], on_security=print, sandbox=sandbox)

    Without a sandbox given, the first command prepares the best one this machine offers
    (`safety.sandbox = "auto"`, network allowed) for this tool alone.
    """

    name = "shell_exec"
    Arguments = ShellArguments
    subject = "command"
    brief = "Run a /bin/sh command in the workspace; returns its output and exit code."

    def __init__(
        self,
        workspace: Path,
        *,
        timeout_secs: float,
        max_output_bytes: int,
        blocked_patterns: list[str],
        secret_env_names: list[str],
        on_security: SecurityHook,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.workspace = workspace
        self.timeout_secs = timeout_secs
        self.max_output_bytes = max_output_bytes
        self.blocked_patterns = blocked_patterns
        self.secret_env_names = secret_env_names
        self.on_security = on_security
        self.sandbox = sandbox
        self.tag = workspace_tag(workspace)

    def environment(self) -> dict[str, str]:
        """The command's environment: the harness's, less its secrets, as the sandbox sets
        it, marked with the workspace's tag."""
        if self.sandbox is None:
            self.sandbox = Sandbox.prepare("auto", workspace=self.workspace)
        env = self.sandbox.environment(shell_environment(os.environ, self.secret_env_names))
        env[MARKER] = self.tag
        return env

    def description(self) -> str:
        return (
            "Run a command with /bin/sh in the workspace directory and return its combined "
            f"stdout and stderr and exit code. Times out after {self.timeout_secs:g}s; "
            f"output is capped at {self.max_output_bytes} bytes."
        )

    async def call(self, arguments: ShellArguments) -> ToolResult:
        command = arguments.command
        meta: dict[str, Any] = {
            "command": command,
            "exit_code": None,
            "timed_out": False,
            "bytes": 0,
        }
        if not command.strip():
            return ToolResult(
                "error: empty command; give a shell command to run", ok=False, meta=meta
            )
        if holds_stand_in(command):
            return ToolResult(STAND_IN_COMMAND, ok=False, meta=meta)
        pattern = blocked_by(command, self.blocked_patterns)
        if pattern is not None:
            self.on_security(
                {
                    "kind": "blocked_command",
                    "tool": self.name,
                    "command": command,
                    "pattern": pattern,
                }
            )
            return ToolResult(
                f"error: command blocked by safety pattern '{pattern}'; it was not run. "
                "Find another way that does not match this pattern.",
                ok=False,
                meta=meta,
            )
        env = self.environment()
        assert self.sandbox is not None
        try:
            process = await Running.start(self.sandbox, command, cwd=self.workspace, env=env)
        except (OSError, subprocess.SubprocessError) as failure:
            # A sandbox that cannot be applied fails closed: the command does not run.
            return ToolResult(f"error: could not start /bin/sh: {failure}", ok=False, meta=meta)
        output = CappedOutput(self.max_output_bytes)
        outcome = await supervise(process, output, self.timeout_secs, self.sandbox.settle)
        self.sandbox.settle()  # orphans it left are known to the watchdog now
        text = bytes(output.kept).decode("utf-8", errors="replace")
        meta.update(
            exit_code=outcome.exit_code,
            timed_out=outcome.timed_out,
            bytes=len(output.kept),
            dropped_bytes=output.dropped,
            **({"left": outcome.left} if outcome.left else {}),
        )
        return ToolResult(
            render(text, output.dropped, outcome, self.timeout_secs),
            ok=outcome.exit_code == 0,
            meta=meta,
        )
