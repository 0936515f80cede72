"""The fault matrix: the demo task run through each fault a run meets, resumed if it stopped.

    python benchmarks/faults.py [--parts 4] [--only NAME]

For each fault: whether the task was finished (after `ouroboros resume` where the run
stopped), how long the harness took to exit after SIGTERM, parts lost (missing from
results.txt) and parts duplicated (a part's record command run more than once: every record
command first appends its part to records.log in the workspace, after any hold). The agent
is the demo's scripted agent on a loopback server; every run is a real `ouroboros` process.
Floors: every fault survived, 0 lost, 0 duplicated, every stop within 1 s.

Then each misbehaving server of tests/faults/servers.py (a short run against it): whether
the run ended as it should (went on, retried, or stopped at once with one line), with no
traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import tomli_w

from ouroboros.demo import DEMO_PROMPT, RecordingAgent, expected_results, make_workspace
from ouroboros.protocols import Message
from ouroboros.store.log import EVENTS_FILE, list_runs
from ouroboros.store.state_file import STATE_FILE
from ouroboros.testing import Fault, Reply, ScriptedServer

MAX_RESUMES = 3
STOP_FLOOR_SECS = 1.0
WAIT_SECS = 30.0
RECORD = re.compile(r"grep -qxF '(part_\d+):")
HOLD = "echo $$ > held_tool; sleep 30; "
OUTAGE_SECS = 4.0


class BenchAgent(RecordingAgent):
    """The demo agent; record commands also append their part to records.log. It can hold
    the Nth record command (sleeping before it records) or the Nth model request, and inject
    faults into the server when called for the Nth time."""

    def __init__(
        self,
        parts: int,
        *,
        hold_tool_at: int = 0,
        hold_request_at: int = 0,
        inject_at: dict[int, list[Fault]] | None = None,
    ) -> None:
        super().__init__(parts)
        self.hold_tool_at, self.hold_request_at = hold_tool_at, hold_request_at
        self.inject_at = inject_at or {}
        self.server: ScriptedServer | None = None
        self.calls = self.records = 0

    def __call__(self, messages: list[Message]) -> Reply:
        self.calls += 1
        if self.calls in self.inject_at and self.server is not None:
            self.server.inject(*self.inject_at[self.calls])
        if self.calls == self.hold_request_at:
            return Fault("slow", seconds=120)  # type: ignore[return-value]
        reply = super().__call__(messages)
        return Reply(reply.text, [self.marked(name, args) for name, args in reply.tool_calls])

    def marked(self, name: str, args: Any) -> tuple[str, Any]:
        command = args.get("command", "") if isinstance(args, dict) else ""
        match = RECORD.search(command)
        if name != "shell_exec" or not match:
            return name, args
        command = command.replace(HOLD, "")
        if "records.log" not in command:
            command = f"echo {match.group(1)} >> records.log; {command}"
        self.records += 1
        hold = HOLD if self.records == self.hold_tool_at else ""
        return name, {"command": hold + command}


@dataclass
class Outcome:
    name: str
    survived: bool
    stop_secs: float | None
    lost: int
    duplicated: int
    resumes: int
    note: str = ""


def make_project(root: Path, base_url: str, parts: int, **model: Any) -> tuple[Path, str]:
    config = {
        "model": {
            "base_url": base_url,
            "name": "scripted",
            "max_retry_secs": 60,
            "request_timeout_secs": 30,
            **model,
        },
        "agent": {"max_turns": 2 + 2 * parts + 2},
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / "ouroboros.toml").write_text(tomli_w.dumps(config))
    (root / "SYSTEM_PROMPT.md").write_text(DEMO_PROMPT)
    keys = make_workspace(root / "workspace", parts, chars_per_part=3000)
    return root / "ouroboros.toml", expected_results(keys)


def env() -> dict[str, str]:
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith("OUROBOROS_") and k != "OLLAMA_HOST"
    }
    clean["XDG_CONFIG_HOME"] = "/nonexistent-ouroboros-benchmark"
    return clean


def start(
    root: Path, command: str, preexec: Callable[[], None] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ouroboros",
            command,
            "--config",
            str(root / "ouroboros.toml"),
            "--headless",
        ],
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        preexec_fn=preexec,
    )


def finish(process: subprocess.Popen[str]) -> int:
    """Wait for the process; its exit code, or -1 if it printed a traceback."""
    _, err = process.communicate(timeout=120)
    return -1 if "Traceback" in err else process.returncode


def events(root: Path) -> list[dict[str, Any]]:
    runs = list_runs(root / ".ouroboros")
    if not runs:
        return []
    path = root / ".ouroboros" / "runs" / runs[-1] / EVENTS_FILE
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def wait_for(condition: Callable[[], Any], process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + WAIT_SECS
    while time.monotonic() < deadline and process.poll() is None:
        if condition():
            return
        time.sleep(0.01)
    raise RuntimeError("the fault point never came")


def wait_until_held(root: Path, agent: BenchAgent, process: subprocess.Popen[str]) -> None:
    """Until the agent's held tool call has started, or else its held request has come."""
    if agent.hold_tool_at:
        wait_for(lambda: (root / "workspace" / "held_tool").exists(), process)
    else:
        wait_for(lambda: agent.calls >= agent.hold_request_at, process)


def stop_by_sigterm(process: subprocess.Popen[str]) -> float:
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return float("inf")
    return time.monotonic() - sent


def kill_held(root: Path) -> None:
    try:
        os.killpg(int((root / "workspace" / "held_tool").read_text()), signal.SIGKILL)
    except (OSError, ValueError):
        pass


def resume_until_done(root: Path, expected: str) -> int:
    resumes = 0
    while resumes < MAX_RESUMES and not finished(root, expected):
        resumes += 1
        if finish(start(root, "resume")) != 0:
            break
    return resumes


def finished(root: Path, expected: str) -> bool:
    path = root / "workspace" / "results.txt"
    return path.exists() and path.read_text() == expected


def outcome(
    name: str, root: Path, expected: str, stop_secs: float | None, resumes: int, note: str = ""
) -> Outcome:
    recorded = root / "workspace" / "results.txt"
    lines = set(recorded.read_text().splitlines()) if recorded.exists() else set()
    lost = len(set(expected.splitlines()) - lines)
    records_log = root / "workspace" / "records.log"
    counts = Counter(records_log.read_text().split()) if records_log.exists() else Counter()
    duplicated = sum(n - 1 for n in counts.values())
    return Outcome(name, finished(root, expected), stop_secs, lost, duplicated, resumes, note)


# -- the faults: each makes a project, runs it through the fault, resumes, and measures --

Scenario = Callable[[Path, int], Outcome]


def server_fault(name: str, faults: list[Fault], at: int = 3) -> Scenario:
    def scenario(root: Path, parts: int) -> Outcome:
        agent = BenchAgent(parts, inject_at={at: faults})
        with ScriptedServer(agent) as server:
            agent.server = server
            config, expected = make_project(root, server.base_url, parts)
            code = finish(start(root, "run"))
            resumes = resume_until_done(root, expected)
        return outcome(name, root, expected, None, resumes, f"run exit {code}")

    return scenario


def sigterm(
    name: str, *, hold_tool_at: int = 0, hold_request_at: int = 0, outage_at: int = 0
) -> Scenario:
    """SIGTERM once the run waits where asked: in a tool, for a reply, or in a backoff."""

    def scenario(root: Path, parts: int) -> Outcome:
        inject = {outage_at: [Fault("outage", seconds=OUTAGE_SECS)]} if outage_at else {}
        agent = BenchAgent(
            parts, hold_tool_at=hold_tool_at, hold_request_at=hold_request_at, inject_at=inject
        )
        with ScriptedServer(agent) as server:
            agent.server = server
            config, expected = make_project(root, server.base_url, parts)
            process = start(root, "run")
            if outage_at:
                wait_for(lambda: any(e["type"] == "retry" for e in events(root)), process)
            else:
                wait_until_held(root, agent, process)
            time.sleep(0.2)  # well inside the wait
            stop = stop_by_sigterm(process)
            kill_held(root)
            code = finish(process)
            wait_until_up(server.port)  # the outage ends by itself
            resumes = resume_until_done(root, expected)
        return outcome(name, root, expected, stop, resumes, f"exit {code}")

    return scenario


def wait_until_up(port: int) -> None:
    deadline = time.monotonic() + WAIT_SECS
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)


def kill_9(
    name: str,
    *,
    hold_tool_at: int = 0,
    hold_request_at: int = 0,
    damage: Callable[[Path], None] | None = None,
) -> Scenario:
    def scenario(root: Path, parts: int) -> Outcome:
        agent = BenchAgent(parts, hold_tool_at=hold_tool_at, hold_request_at=hold_request_at)
        with ScriptedServer(agent) as server:
            agent.server = server
            config, expected = make_project(root, server.base_url, parts)
            process = start(root, "run")
            wait_until_held(root, agent, process)
            process.kill()
            process.wait()
            kill_held(root)
            if damage is not None:
                damage(run_dir(root))
            resumes = resume_until_done(root, expected)
        return outcome(name, root, expected, None, resumes)

    return scenario


def run_dir(root: Path) -> Path:
    return root / ".ouroboros" / "runs" / list_runs(root / ".ouroboros")[-1]


def truncate_snapshot(run: Path) -> None:
    data = (run / STATE_FILE).read_bytes()
    (run / STATE_FILE).write_bytes(data[: len(data) // 3])


def file_size_limit(root: Path, parts: int) -> Outcome:
    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (16_000, 16_000))

    agent = BenchAgent(parts)
    with ScriptedServer(agent) as server:
        agent.server = server
        config, expected = make_project(root, server.base_url, parts)
        code = finish(start(root, "run", limit))
        resumes = resume_until_done(root, expected)
    return outcome("ulimit -f (16 kB)", root, expected, None, resumes, f"run exit {code}")


def full_disk(root: Path, parts: int) -> Outcome:
    state_dir = root / ".ouroboros"
    state_dir.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=24k", "tmpfs", str(state_dir)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        return Outcome(
            "full disk (tmpfs 24 kB)",
            False,
            None,
            0,
            0,
            0,
            "skipped: cannot mount a tmpfs (needs root)",
        )
    try:
        agent = BenchAgent(parts)
        with ScriptedServer(agent) as server:
            agent.server = server
            config, expected = make_project(root, server.base_url, parts)
            code = finish(start(root, "run"))
            subprocess.run(["mount", "-o", "remount,size=4m", str(state_dir)], check=True)
            resumes = resume_until_done(root, expected)
        return outcome("full disk (tmpfs 24 kB)", root, expected, None, resumes, f"run exit {code}")
    finally:
        subprocess.run(["umount", "-l", str(state_dir)], capture_output=True)


def broken_pipe(root: Path, parts: int) -> Outcome:
    agent = BenchAgent(parts)
    with ScriptedServer(agent) as server:
        agent.server = server
        config, expected = make_project(root, server.base_url, parts)
        command = (
            f"{sys.executable} -m ouroboros run --config {config} --headless "
            "| head -2 >/dev/null; exit ${PIPESTATUS[0]}"
        )
        ran = subprocess.run(
            ["bash", "-c", command], env=env(), capture_output=True, text=True, timeout=120
        )
        code = -1 if "Traceback" in ran.stderr else ran.returncode
        resumes = resume_until_done(root, expected)
    return outcome("broken pipe (run | head -2)", root, expected, None, resumes, f"run exit {code}")


SCENARIOS: dict[str, Scenario] = {
    "none": server_fault("none", []),
    "dropped stream": server_fault("dropped stream", [Fault("drop")]),
    "HTTP 500, 503, 429": server_fault(
        "HTTP 500, 503, 429", [Fault("status", 500), Fault("status", 503), Fault("status", 429)]
    ),
    "garbage frame": server_fault("garbage frame", [Fault("garbage")]),
    "no [DONE]": server_fault("no [DONE]", [Fault("no_done")]),
    "empty 200": server_fault("empty 200", [Fault("empty")]),
    "slow first byte (2 s)": server_fault("slow first byte (2 s)", [Fault("slow", seconds=2)]),
    "outage (3 s)": server_fault("outage (3 s)", [Fault("outage", seconds=3)]),
    "HTTP 401 (stops; resume)": server_fault(
        "HTTP 401 (stops; resume)", [Fault("status", 401, "unauthorized")]
    ),
    "kill -9 mid-tool": kill_9("kill -9 mid-tool", hold_tool_at=2),
    "kill -9 mid-request": kill_9("kill -9 mid-request", hold_request_at=5),
    "kill -9, state.json cut": kill_9(
        "kill -9, state.json cut", hold_tool_at=2, damage=truncate_snapshot
    ),
    "kill -9, state.json gone": kill_9(
        "kill -9, state.json gone",
        hold_request_at=6,
        damage=lambda run: (run / STATE_FILE).unlink(),
    ),
    "SIGTERM awaiting a reply": sigterm("SIGTERM awaiting a reply", hold_request_at=5),
    "SIGTERM mid-tool": sigterm("SIGTERM mid-tool", hold_tool_at=2),
    "SIGTERM mid-backoff": sigterm("SIGTERM mid-backoff", outage_at=4),
    "ulimit -f": file_size_limit,
    "full disk": full_disk,
    "broken pipe": broken_pipe,
}


def report(outcomes: list[Outcome]) -> str:
    rows = [
        f"{'fault':<30} {'survived':>8} {'stop (s)':>9} {'lost':>5} {'dup':>4} "
        f"{'resumes':>8}  note",
        "-" * 88,
    ]
    for o in outcomes:
        stop = f"{o.stop_secs:.2f}" if o.stop_secs is not None else "-"
        rows.append(
            f"{o.name:<30} {'yes' if o.survived else 'NO':>8} {stop:>9} {o.lost:>5} "
            f"{o.duplicated:>4} {o.resumes:>8}  {o.note}"
        )
    measured = [o for o in outcomes if not o.note.startswith("skipped")]
    stops = [o.stop_secs for o in measured if o.stop_secs is not None]
    holds = (
        all(o.survived for o in measured)
        and not any(o.lost or o.duplicated for o in measured)
        and all(s <= STOP_FLOOR_SECS for s in stops)
    )
    survived = sum(o.survived for o in measured)
    rows += [
        "",
        f"survived {survived}/{len(measured)}, lost {sum(o.lost for o in measured)}, "
        f"duplicated {sum(o.duplicated for o in measured)}, slowest stop "
        f"{f'{max(stops):.2f} s' if stops else '-'}; floors (100% survived, 0 lost, "
        f"0 duplicated, every stop within {STOP_FLOOR_SECS:.0f} s): "
        f"{'all hold' if holds else 'MISSED'}",
    ]
    return "\n".join(rows)


def server_faults() -> list[str]:
    """One row per fault server: the outcome it should have, and whether it had it."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    try:
        from ouroboros.errors import EXIT_NEEDS_FIX, EXIT_PAUSED
        from tests.faults.servers import FAULTS, run_against
        from tests.faults.servers import start as start_fault
    except ImportError as error:
        return [f"(no fault servers: {error})"]
    rows = [f"{'server fault':<58} {'should':>10} {'ok':>4}", "-" * 74]
    held = 0
    with tempfile.TemporaryDirectory(prefix="ouroboros-servers-") as tmp:
        for index, (name, fault) in enumerate(FAULTS.items()):
            server = start_fault(name)
            try:
                result = run_against(
                    Path(tmp) / f"s{index}", server, fault.model, max_turns=2, timeout=60
                )
            finally:
                server.stop()
            retried = any(e["type"] == "retry" for e in events(Path(tmp) / f"s{index}"))
            # a permanent failure needs a fix (exit 2); a run that went on stops paused at
            # its two turns (exit 3)
            ok = "Traceback" not in result.stderr and (
                result.returncode == EXIT_NEEDS_FIX
                and len(result.stderr.splitlines()) == 1
                and not retried
                if fault.outcome == "fails_fast"
                else result.returncode == EXIT_PAUSED and retried == (fault.outcome == "retried")
            )
            held += ok
            rows.append(
                f"{fault.description[:58]:<58} {fault.outcome:>10} {'yes' if ok else 'NO':>4}"
            )
            print(f"  server {name}: done", file=sys.stderr, flush=True)
    return rows + [
        "",
        f"{held}/{len(FAULTS)} ended as they should (went on, retried once, or "
        "stopped at once with one line and no retry), no traceback",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--only", action="append", choices=list(SCENARIOS), default=None)
    args = parser.parse_args()
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="ouroboros-faults-") as tmp:
        for index, name in enumerate(args.only or SCENARIOS):
            started = time.monotonic()
            outcomes.append(SCENARIOS[name](Path(tmp) / f"f{index}", args.parts))
            print(f"  {name}: {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
    print(report(outcomes))
    if not args.only:
        print()
        print("\n".join(server_faults()))


if __name__ == "__main__":
    main()
