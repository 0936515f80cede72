"""Overhead: the harness's own CPU per turn, next to a bare loop doing the same work.

Three figures, each with its floor:

1. workload (default): 200 small files read and 200 shell commands (442 requests: a listing,
   the reads, the commands, 40 progress writes, task_complete) against the scripted server on
   loopback, in a window so large nothing is masked. Once through the harness (`run_agent`,
   no terminal output), once through a bare loop: httpx streaming, the same tool objects
   (ouroboros.tools: Toolbox over default_tools, shell in the same sandbox), no context
   management, no logging. Floor: harness CPU at most 1.5x the bare loop's.
2. `--grow`: one run of 5,000 turns of short file reads (10,000 messages, nothing masked);
   the harness's ms of CPU per turn at 1k, 5k and 10k messages (floor: at 10k at most 2x the
   figure at 1k) and its RSS at turn 500 and turn 5,000 (floor: at most 1.5x).
3. `ouroboros --version`: wall time, best of 5 (floor: under 0.15 s).

The server and each side run in processes of their own, so a figure is the CPU of that
side's process alone (time.process_time over the whole run: the harness's own set-up of the
sandbox, the lock and the window included; interpreter start-up and imports not; shell
commands' own CPU not, as they are child processes), and its peak RSS (start-up included).
In --grow the server counts 12 tokens a message instead of tokenizing, so that the server's
own work stays small next to the harness's at 10,000 messages.

    python benchmarks/overhead.py [--grow] [--quick] [--repeat N] [--profile] [--budget SECS]

`--profile` prints the harness's cProfile, top 15 by cumulative time (its figures are then
the profiled ones, several times slower).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

MAX_RATIO = 1.5
MAX_GROWTH = 2.0
MAX_RSS_GROWTH = 1.5
MAX_VERSION_SECS = 0.15
WINDOW = 2_000_000  # tokens: nothing is ever masked
MEASURED_TURNS = 100  # turns averaged for each ms-per-turn figure in --grow
SYSTEM_PROMPT = "You are a careful clerk. Read each file in data/ and note it in seen.txt.\n"
FIRST_MESSAGE = "Begin."


# ---- the scripted agent (runs in the server process) -------------------------------------


def workload_script(parts: int) -> Iterator[Any]:
    """list_dir, then for each part a read and a shell command, a progress write every fifth
    part, then task_complete."""
    from ouroboros.testing import Reply

    yield Reply("Looking around.", [("list_dir", {"path": "."})])
    for i in range(1, parts + 1):
        yield Reply(f"Reading part {i}.", [("file_read", {"path": f"data/part_{i:03d}.txt"})])
        yield Reply(f"Noting part {i}.", [("shell_exec", {"command": f"echo {i} >> seen.txt"})])
        if i % 5 == 0:
            yield Reply(
                "Saving progress.",
                [("file_write", {"path": "progress.md", "content": f"next: {i + 1}\n"})],
            )
    yield Reply("Done.", [("task_complete", {"summary": f"{parts} parts noted"})])


def grow_script(turns: int) -> Iterator[Any]:
    """Short reads of tiny files, one per turn, then task_complete."""
    from ouroboros.testing import Reply

    for i in range(turns - 1):
        yield Reply("Next.", [("file_read", {"path": f"tiny/{i % 20}.txt"})])
    yield Reply("Done.", [("task_complete", {"summary": "grown"})])


class _Counter(list):
    """Stands in for ScriptedServer.requests: counts requests without keeping their bodies
    (10,000 bodies of up to 10,000 messages each would not fit in memory)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def append(self, item: Any) -> None:
        self.count += 1

    def __len__(self) -> int:
        return self.count


def serve(mode: str, size: int) -> None:
    """The scripted server, in this process: prints its URL, serves until stdin closes."""
    from ouroboros.testing import ScriptedServer
    from ouroboros.testing.tokenizer import ServerTokenizer, ratio

    class LeanServer(ScriptedServer):
        """Counts 12 tokens a message and keeps no prompt cache: at 10,000 messages counting
        for real would cost the server several times what the harness spends."""

        def count_tokens(self, messages: list[Any], tools: Any) -> int:
            return 12 * len(messages) + 400

        def _read_prompt(self, messages: list[Any], tools: Any) -> int:
            return 0

    tokenizer = ServerTokenizer("ratio-4", text=ratio(4.0))
    if mode == "workload":
        server = ScriptedServer(workload_script(size), context_length=WINDOW, tokenizer=tokenizer)
    else:
        server = LeanServer(grow_script(size), context_length=WINDOW, tokenizer=tokenizer)
    server.requests = _Counter()
    with server:
        print(server.base_url, flush=True)
        sys.stdin.read()


# ---- the two sides (each in a process of its own) ----------------------------------------


def make_workspace(workspace: Path) -> None:
    (workspace / "data").mkdir(parents=True, exist_ok=True)
    (workspace / "tiny").mkdir(exist_ok=True)
    line = "The harbour office copied each record by hand and checked it twice. "
    for i in range(1, 201):
        (workspace / "data" / f"part_{i:03d}.txt").write_text(f"KEY: {i:06x}\n{line * 6}\n")
    for i in range(20):
        (workspace / "tiny" / f"{i}.txt").write_text(f"ok {i}\n")


def make_project(root: Path, base_url: str) -> Path:
    (root / "SYSTEM_PROMPT.md").write_text(SYSTEM_PROMPT)
    (root / "ouroboros.toml").write_text(
        f'[model]\nbase_url = "{base_url}"\nname = "scripted"\ncontext_limit = {WINDOW}\n'
        f'[agent]\nworkspace = "workspace"\nmax_idle_turns = 0\n'
    )
    return root / "ouroboros.toml"


def rss_mb() -> float:
    """Resident set size now, in MB."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


def run_harness(project: Path, budget: float, rss_turns: list[int]) -> dict[str, Any]:
    """One run through `run_agent`; CPU at each turn's start, RSS at `rss_turns`."""
    from ouroboros.config import load_config
    from ouroboros.loop.runner import run_agent
    from ouroboros.protocols import RunHooks

    loaded = load_config(project, {})
    hooks = RunHooks()
    turn_cpu: list[float] = []
    rss: dict[int, float] = {}
    masked = [0]
    deadline = time.monotonic() + budget

    def on_event(event: Any) -> None:  # an ouroboros.store.events model
        masked[0] += event.type in ("context_mask", "wind_down", "session_restart")
        if event.type != "assistant":
            return
        turn_cpu.append(time.process_time())
        if len(turn_cpu) in rss_turns:
            rss[len(turn_cpu)] = rss_mb()
            if len(turn_cpu) == max(rss_turns):  # how much of it is garbage in cycles
                gc.collect()
                rss[-1] = rss_mb()
        if time.monotonic() > deadline:
            hooks.stop.request("budget")

    hooks.on_event = on_event
    started = time.process_time()
    code = asyncio.run(run_agent(loaded, hooks))
    return {
        "cpu": time.process_time() - started,
        "code": code,
        "turns": len(turn_cpu),
        "turn_cpu": turn_cpu,
        "rss": rss,
        "peak_rss": peak_rss_mb(),
        "masked": masked[0],
    }


async def bare_loop(base_url: str, workspace: Path) -> int:
    """Ask, run the calls, append, repeat; no window management, no log. Returns requests."""
    import httpx

    from ouroboros.protocols import ToolCall
    from ouroboros.sandbox.policy import Sandbox
    from ouroboros.tools import TaskComplete, Toolbox, default_tools

    sandbox = Sandbox.prepare("auto", workspace=workspace)
    toolbox = Toolbox(
        default_tools(
            workspace,
            shell_timeout_secs=30,
            max_output_bytes=65536,
            blocked_patterns=[],
            secret_env_names=[],
            on_security=lambda *_: None,
            sandbox=sandbox,
        )
    )
    tools = toolbox.schemas() + [TaskComplete().schema()]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": FIRST_MESSAGE},
    ]
    requests = 0
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
        while True:
            requests += 1
            text, calls = await stream_reply(http, messages, tools)
            wire = [{"id": c["id"], "type": "function", "function": c["function"]} for c in calls]
            messages.append({"role": "assistant", "content": text, "tool_calls": wire})
            if any(c["function"]["name"] == "task_complete" for c in calls) or not calls:
                break
            for c in calls:
                result = await toolbox.run(
                    ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
                )
                messages.append(
                    {"role": "tool", "tool_call_id": c["id"], "content": result.content}
                )
    sandbox.close()
    return requests


async def stream_reply(
    http: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> tuple[str, list[dict[str, Any]]]:
    body = {
        "model": "scripted",
        "messages": messages,
        "tools": tools,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 2048,
    }
    text, calls = "", {}
    async with http.stream("POST", "/v1/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[6:]).get("choices") or []:
                delta = choice.get("delta") or {}
                text += delta.get("content") or ""
                for call in delta.get("tool_calls") or []:
                    slot = calls.setdefault(
                        call.get("index", 0), {"id": "", "function": {"name": "", "arguments": ""}}
                    )
                    slot["id"] = call.get("id") or slot["id"]
                    function = call.get("function") or {}
                    slot["function"]["name"] += function.get("name") or ""
                    slot["function"]["arguments"] += function.get("arguments") or ""
    return text, [calls[index] for index in sorted(calls)]


def worker(
    side: str, base_url: str, root: Path, budget: float, rss_turns: list[int], profile: bool
) -> None:
    """One side in this process; prints its figures as one JSON line."""
    import cProfile
    import pstats

    profiler = cProfile.Profile(time.process_time) if profile else None  # CPU, not waits
    if profiler is not None:
        profiler.enable()
    if side == "harness":
        figures = run_harness(make_project(root, base_url), budget, rss_turns)
    else:
        started = time.process_time()
        turns = asyncio.run(bare_loop(base_url, root / "workspace"))
        figures = {"cpu": time.process_time() - started, "turns": turns, "peak_rss": peak_rss_mb()}
    if profiler is not None:
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(15)
    print(json.dumps(figures), flush=True)


# ---- the driver ----------------------------------------------------------------------------


def run_side(
    side: str, mode: str, size: int, budget: float, rss_turns: list[int], profile: bool
) -> dict[str, Any]:
    """A fresh server and project for one side; that side's figures."""
    me = [sys.executable, str(Path(__file__).resolve())]
    with tempfile.TemporaryDirectory(prefix="ouroboros-overhead-") as tmp:
        root = Path(tmp)
        make_workspace(root / "workspace")
        server = subprocess.Popen(
            [*me, "_serve", mode, str(size)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None
            base_url = server.stdout.readline().strip()
            done = subprocess.run(
                [
                    *me,
                    "_work",
                    side,
                    base_url,
                    str(root),
                    str(budget),
                    ",".join(map(str, rss_turns)),
                    str(int(profile)),
                ],
                capture_output=True,
                text=True,
                cwd=root,
            )
        finally:
            server.communicate(timeout=30)
    if done.returncode != 0 or not done.stdout.strip():
        sys.exit(f"the {side} side failed:\n{done.stderr[-3000:]}")
    if profile:
        print(f"\n--- cProfile of the {side}, top 15 by cumulative time ---")
        print(done.stderr.strip())
    return json.loads(done.stdout.strip().splitlines()[-1])


def version_secs() -> float:
    """`ouroboros --version`, wall time, best of 5."""
    times = []
    for _ in range(5):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "ouroboros", "--version"], check=True, capture_output=True
        )
        times.append(time.perf_counter() - started)
    return min(times)


def verdict(holds: bool) -> str:
    return "holds" if holds else "FAILS"


def workload(args: argparse.Namespace) -> list[tuple[str, bool]]:
    parts = 40 if args.quick else 200
    harness = best_of(
        args.repeat, lambda: run_side("harness", "workload", parts, args.budget, [], args.profile)
    )
    bare = best_of(args.repeat, lambda: run_side("bare", "workload", parts, args.budget, [], False))
    print(
        f"workload: {parts} file reads, {parts} shell commands, window {WINDOW:,} tokens, "
        f"best of {args.repeat} runs each"
    )
    print(f"{'':8} {'requests':>8} {'CPU s':>7} {'ms/turn':>8} {'peak RSS':>9}")
    for name, figures in (("harness", harness), ("bare", bare)):
        print(
            f"{name:8} {figures['turns']:>8} {figures['cpu']:>7.2f} "
            f"{1000 * figures['cpu'] / figures['turns']:>8.2f} {figures['peak_rss']:>6.1f} MB"
        )
    ratio = harness["cpu"] / bare["cpu"]
    if harness["masked"]:
        print(f"(the harness masked, wound down or restarted {harness['masked']} times)")
    print(
        f"ratio harness/bare: {ratio:.2f}x CPU, "
        f"{harness['peak_rss'] / bare['peak_rss']:.2f}x peak RSS"
    )
    return [(f"CPU ratio {ratio:.2f}x <= {MAX_RATIO}x", ratio <= MAX_RATIO)]


def best_of(runs: int, side: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The run with the least CPU: on a shared machine the others only add noise."""
    return min((side() for _ in range(runs)), key=lambda figures: figures["cpu"])


def ms_per_turn(turn_cpu: list[float], turn: int) -> float | None:
    """Mean ms of CPU per turn over the MEASURED_TURNS turns (at most half of them) before
    `turn`."""
    window = min(MEASURED_TURNS, turn // 2)
    if turn >= len(turn_cpu) or window < 1:
        return None
    return 1000 * (turn_cpu[turn] - turn_cpu[turn - window]) / window


def grow(args: argparse.Namespace) -> list[tuple[str, bool]]:
    sizes = [200, 1000, 2000] if args.quick else [1000, 5000, 10000]
    rss_turns = [100, 1000] if args.quick else [500, 5000]
    turns = sizes[-1] // 2 + 1
    harness = run_side("harness", "grow", turns, args.budget, rss_turns, args.profile)
    print(
        f"grow: {harness['turns']} turns of short reads (of {turns}; budget "
        f"{args.budget:.0f} s), window {WINDOW:,} tokens, {harness['masked']} masking or "
        f"restart events"
    )
    per_turn = {size: ms_per_turn(harness["turn_cpu"], size // 2) for size in sizes}
    for size, ms in per_turn.items():
        shown = f"{ms:.2f} ms/turn" if ms is not None else "not reached in the budget"
        print(f"  at {size:>6,} messages: {shown}")
    reached = len(harness["turn_cpu"]) - 1
    if per_turn[sizes[-1]] is None and (ms := ms_per_turn(harness["turn_cpu"], reached)):
        print(f"  at {2 * reached:>6,} messages (the last turn reached): {ms:.2f} ms/turn")
    rss = {int(turn): mb for turn, mb in harness["rss"].items()}
    for turn in rss_turns:
        print(
            f"  RSS at turn {turn:,}: " + (f"{rss[turn]:.1f} MB" if turn in rss else "not reached")
        )
    if -1 in rss:
        print(f"  RSS at turn {rss_turns[-1]:,} after a full gc.collect(): {rss[-1]:.1f} MB")
    first, last = per_turn[sizes[0]], per_turn[sizes[-1]]
    growth = last / first if first and last else None
    rss_growth = rss[rss_turns[1]] / rss[rss_turns[0]] if all(t in rss for t in rss_turns) else None
    return [
        (
            f"ms/turn at {sizes[-1]:,} msgs = {times(growth)} the figure at {sizes[0]:,} "
            f"<= {MAX_GROWTH}x",
            growth is not None and growth <= MAX_GROWTH,
        ),
        (
            f"RSS at turn {rss_turns[1]:,} = {times(rss_growth)} turn {rss_turns[0]:,} "
            f"<= {MAX_RSS_GROWTH}x",
            rss_growth is not None and rss_growth <= MAX_RSS_GROWTH,
        ),
    ]


def times(ratio: float | None) -> str:
    return "(not reached)" if ratio is None else f"{ratio:.2f}x"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_serve":
        serve(sys.argv[2], int(sys.argv[3]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_work":
        side, base_url, root, budget, turns, profile = sys.argv[2:8]
        worker(
            side,
            base_url,
            Path(root),
            float(budget),
            [int(t) for t in turns.split(",") if t],
            profile == "1",
        )
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grow", action="store_true", help="the growing-conversation mode")
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="print the harness's cProfile, top 15 by cumulative time",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=2,
        help="runs of each side in the workload mode; the best counts",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=170.0,
        help="most seconds for the harness's run (it stops there)",
    )
    args = parser.parse_args()
    floors = grow(args) if args.grow else workload(args)
    secs = version_secs()
    print(f"ouroboros --version: {secs:.3f} s (best of 5)")
    floors.append((f"--version {secs:.3f} s < {MAX_VERSION_SECS} s", secs < MAX_VERSION_SECS))
    print("floors:")
    for text, holds in floors:
        print(f"  {verdict(holds)}: {text}")


if __name__ == "__main__":
    main()
