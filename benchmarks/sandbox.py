"""Sandbox cost: milliseconds per shell_exec with the sandbox (Landlock, and Landlock with the
network cut) against the sandbox off, and per file tool call with redaction against without.

    python benchmarks/sandbox.py [--commands 200]

Calls alternate between the setups so that a busy machine slows them alike, in a process
that has loaded the whole harness (forking costs more in a bigger process). Floor: the sandbox
adds at most 5 ms per command at the median.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Awaitable, Callable

import ouroboros.cli
from ouroboros.protocols import ToolCall
from ouroboros.sandbox.policy import Sandbox
from ouroboros.sandbox.secrets import Redactor
from ouroboros.tools import ShellExec, Toolbox, default_tools

FLOOR_MS = 5.0
LOADED = ouroboros.cli.__name__  # the whole harness is loaded: process size matters to spawning
COMMAND = "echo hello > out.txt && cat out.txt"


def shell(workspace: Path, sandbox: Sandbox) -> ShellExec:
    return ShellExec(
        workspace,
        timeout_secs=30,
        max_output_bytes=65536,
        blocked_patterns=[],
        secret_env_names=[],
        on_security=lambda e: None,
        sandbox=sandbox,
    )


async def timed(call: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await call()
    return 1000 * (time.perf_counter() - started)


def figures(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered), ordered[int(0.95 * (len(ordered) - 1))]


async def measure(
    setups: dict[str, Callable[[], Awaitable[object]]], rounds: int
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in setups}
    for call in setups.values():  # warm up
        await call()
    for _ in range(rounds):
        for name, call in setups.items():
            times[name].append(await timed(call))
    return times


def report(title: str, times: dict[str, list[float]], baseline: str) -> dict[str, float]:
    print(title)
    base = figures(times[baseline])[0]
    added = {}
    for name, samples in times.items():
        median, p95 = figures(samples)
        extra = "" if name == baseline else f"   added {median - base:+.2f} ms"
        added[name] = median - base
        print(f"  {name:<28} median {median:6.2f} ms   p95 {p95:6.2f} ms{extra}")
    return added


async def shell_costs(workspace: Path, rounds: int) -> dict[str, float]:
    sandboxes = {
        "off": Sandbox.prepare("off", workspace=workspace),
        "landlock": Sandbox.prepare("auto", workspace=workspace),
        "landlock, network cut": Sandbox.prepare("auto", workspace=workspace, network=False),
    }
    try:
        for name, sandbox in sandboxes.items():
            print(f"  {name}: {sandbox.summary}")
        tools = {name: shell(workspace, sandbox) for name, sandbox in sandboxes.items()}
        setups = {
            name: (lambda t=tool: t.run({"command": COMMAND})) for name, tool in tools.items()
        }
        times = await measure(setups, rounds)
        return report(f"shell_exec `{COMMAND}`, {rounds} commands each:", times, "off")
    finally:
        for sandbox in sandboxes.values():
            sandbox.close()


async def file_costs(workspace: Path, rounds: int) -> dict[str, float]:
    (workspace / "notes.md").write_text("a line of notes\n" * 400)

    def tools() -> list:
        return default_tools(
            workspace,
            shell_timeout_secs=30,
            max_output_bytes=65536,
            blocked_patterns=[],
            secret_env_names=[],
            on_security=lambda e: None,
        )

    plain = Toolbox(tools())
    redacted = Toolbox(tools(), redact=Redactor.of(["sk-benchmark-0123456789abcdef"]))
    read = ToolCall("r", "file_read", json.dumps({"path": "notes.md"}))
    write = ToolCall("w", "file_write", json.dumps({"path": "out.md", "content": "x" * 6000}))
    setups = {
        "file_read": lambda: plain.run(read),
        "file_read, redacted": lambda: redacted.run(read),
        "file_write": lambda: plain.run(write),
        "file_write, redacted": lambda: redacted.run(write),
    }
    times = await measure(setups, rounds)
    added = report(
        f"file tools (6 kB), {rounds} calls each:",
        {k: times[k] for k in ("file_read", "file_read, redacted")},
        "file_read",
    )
    added.update(
        report("", {k: times[k] for k in ("file_write", "file_write, redacted")}, "file_write")
    )
    return added


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        added = await shell_costs(workspace, args.commands)
        await file_costs(workspace, args.commands)
    worst = max(v for k, v in added.items() if k != "off")
    verdict = "holds" if worst <= FLOOR_MS else "FAILS"
    print(
        f"\nfloor: the sandbox adds at most {FLOOR_MS:g} ms per command at the median "
        f"(worst here {worst:+.2f} ms): {verdict}"
    )


if __name__ == "__main__":
    asyncio.run(main())
