"""Context efficiency: the demo task at scale, managed in an 8k window vs unmanaged.

The workload: an agent reads dozens of multi-thousand-token files and records each one's key.
Run once with Ouroboros managing an 8192-token window, once on an unlimited window with
nothing masked or restarted. Prints the figures the README quotes.

    python benchmarks/context_efficiency.py [--parts 40] [--chars 8000]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ouroboros.config import load_config
from ouroboros.demo import (
    RecordingAgent,
    expected_results,
    make_workspace,
    stop_when_complete,
    write_demo_project,
)
from ouroboros.events import list_runs, read_events
from ouroboros.runner import RunHooks, run_agent
from ouroboros.scripted import ScriptedServer

UNLIMITED = 10_000_000


@dataclass
class Figures:
    turns: int
    prompt_tokens: int
    peak_pct: float
    largest_prompt: int
    over_limit: int
    restarts: int
    masked: int
    completed: bool
    parts_read_twice: int
    seconds: float


def run_once(parts: int, chars: int, window: int | None) -> Figures:
    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(
            RecordingAgent(parts), model="scripted-demo", context_length=window) as server:
        root = Path(tmp)
        write_demo_project(root, server.base_url, 0)
        keys = make_workspace(root / "workspace", parts, chars_per_part=chars)
        flags = {"model.context_limit": window or UNLIMITED, "model.max_output_tokens": 2048}
        loaded = load_config(root / "ouroboros.toml", flags, env={}, user_file=None)
        started = time.perf_counter()
        asyncio.run(run_agent(loaded, stop_when_complete(RunHooks())))
        seconds = time.perf_counter() - started
        state_dir = root / ".ouroboros"
        events = read_events(state_dir / "runs" / list_runs(state_dir)[-1] / "events.jsonl").events
        reads = Counter(e["arguments"] for e in events
                        if e["type"] == "tool_call" and "data/part_" in e.get("arguments", ""))
        results = (root / "workspace/results.txt")
        return Figures(
            turns=len(server.requests),
            prompt_tokens=sum(server.prompt_tokens),
            peak_pct=100 * max(server.prompt_tokens) / window if window else float("nan"),
            largest_prompt=max(server.prompt_tokens),
            over_limit=server.over_limit,
            restarts=sum(e["type"] == "session_restart" for e in events),
            masked=max((e["total_masked"] for e in events if e["type"] == "context_mask"),
                       default=0),
            completed=results.is_file() and results.read_text() == expected_results(keys),
            parts_read_twice=sum(1 for n in reads.values() if n > 1),
            seconds=seconds,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", type=int, default=40)
    parser.add_argument("--chars", type=int, default=8000, help="characters per file")
    parser.add_argument("--window", type=int, default=8192)
    args = parser.parse_args()

    managed = run_once(args.parts, args.chars, args.window)
    unmanaged = run_once(args.parts, args.chars, None)
    print(f"workload: {args.parts} files of {args.chars} characters (~{args.chars // 3.5:.0f} "
          f"tokens each)\n")
    print(f"{'':28}{'managed (' + str(args.window) + ')':>18}{'unmanaged':>14}")
    rows = [
        ("turns", "turns", "{:d}"),
        ("prompt tokens, total", "prompt_tokens", "{:,d}"),
        ("peak prompt % of window", "peak_pct", "{:.1f}"),
        ("largest prompt, tokens", "largest_prompt", "{:,d}"),
        ("requests over the limit", "over_limit", "{:d}"),
        ("restarts", "restarts", "{:d}"),
        ("observations masked", "masked", "{:d}"),
        ("task completed", "completed", "{}"),
        ("parts read more than once", "parts_read_twice", "{:d}"),
        ("wall time, s", "seconds", "{:.1f}"),
    ]
    for label, field, fmt in rows:
        print(f"{label:28}{fmt.format(getattr(managed, field)):>18}"
              f"{fmt.format(getattr(unmanaged, field)):>14}")
    per_turn_m = managed.prompt_tokens / managed.turns
    per_turn_u = unmanaged.prompt_tokens / unmanaged.turns
    print(f"{'prompt tokens per turn':28}{per_turn_m:>18,.0f}{per_turn_u:>14,.0f}")
    print(f"\nmanaged total prompt tokens = "
          f"{100 * managed.prompt_tokens / unmanaged.prompt_tokens:.1f}% of unmanaged")


if __name__ == "__main__":
    main()
