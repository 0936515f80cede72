"""The handoff: parts redone after restarts by an agent that keeps no notes of its own, with
and without the harness's handoff.

The demo task in a 4k window, done by the demo agent stripped of its notes: it never writes
progress.md and never reads one, and no turns are carried over (context.carryover_turns = 0),
so after a restart it knows only what the new session begins with. With the handoff, its
"Last commands" line names the parts just recorded, and the agent goes on from the newest;
without it, the agent starts over from part 1. (The stripped agent is a fake made to read the
handoff; what the figures show is how much a handoff can carry, not what a model makes of it.)

    python benchmarks/handoff.py [--parts 40] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
from collections import Counter
from pathlib import Path

from ouroboros.config import load_config
from ouroboros.demo import RecordingAgent, expected_results, write_demo_project
from ouroboros.loop.runner import run_agent
from ouroboros.protocols import Message, RunHooks
from ouroboros.store.log import list_runs, read_events
from ouroboros.testing import Reply, ScriptedServer

RECORDED = re.compile(r"part_(\d+):")


class NoNotesAgent(RecordingAgent):
    """The demo agent without progress.md: after a restart it knows what its context says."""

    def __call__(self, messages: list[Message]) -> Reply:
        reply = super().__call__(messages)
        calls = [
            (name, args)
            for name, args in reply.tool_calls
            if not (name == "file_write" and args.get("path") == "progress.md")
        ]
        return Reply(reply.text, calls)

    def save(self, messages: list[Message]) -> Reply:
        return Reply("Nothing of my own to save.")

    def after_listing(self, listing: str, messages: list[Message]) -> Reply:
        return self.read_next(messages)

    def read_next(self, messages: list[Message]) -> Reply:
        done = [
            int(n)
            for m in messages
            if m["role"] in ("user", "assistant")
            for n in RECORDED.findall(m.get("content") or "")
        ]
        for m in messages:  # the record commands of the turns in context
            for call in m.get("tool_calls") or ():
                done += [int(n) for n in RECORDED.findall(call["function"]["arguments"])]
        if done and max(done) >= self.parts:
            summary = f"all {self.parts} parts are recorded in results.txt"
            return Reply(f"Done: {summary}.", [("task_complete", {"summary": summary})])
        part = max(done, default=0) + 1
        return Reply(
            f"Reading part {part}.", [("file_read", {"path": f"data/part_{part:03d}.txt"})]
        )


def run(parts: int, handoff_tokens: int) -> dict[str, object]:
    with (
        tempfile.TemporaryDirectory() as tmp,
        ScriptedServer(NoNotesAgent(parts), model="scripted-demo", context_length=4096) as server,
    ):
        root = Path(tmp)
        keys = write_demo_project(root, server.base_url, parts)
        flags = {
            "context.carryover_turns": 0,
            "context.handoff_max_tokens": handoff_tokens,
            "agent.max_turns": 12 * parts,
        }
        loaded = load_config(root / "ouroboros.toml", flags, env={}, user_file=None)
        asyncio.run(run_agent(loaded, RunHooks()))
        state_dir = root / ".ouroboros"
        events = read_events(state_dir / "runs" / list_runs(state_dir)[-1] / "events.jsonl").events
        reads = Counter(
            m.group(1)
            for e in events
            if e["type"] == "tool_call"
            and (m := re.search(r"part_(\d+)\.txt", e.get("arguments", "")))
        )
        results = root / "workspace/results.txt"
        return {
            "turns": sum(e["type"] == "assistant" for e in events),
            "restarts": sum(e["type"] == "session_restart" for e in events),
            "part reads": sum(reads.values()),
            "parts redone": sum(n - 1 for n in reads.values()),
            "completed": results.is_file() and results.read_text() == expected_results(keys),
            "ended": events[-1].get("reason"),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", type=int, default=40)
    parser.add_argument("--quick", action="store_true", help="12 parts")
    args = parser.parse_args()
    parts = 12 if args.quick else args.parts
    rows = {"with the handoff": run(parts, 600), "without it": run(parts, 0)}
    print(f"{parts} parts, 4k window, no carried turns, an agent that keeps no notes\n")
    names = list(next(iter(rows.values())))
    print(f"{'':18}" + "".join(f"{name:>14}" for name in names))
    for row, figures in rows.items():
        print(f"{row:18}" + "".join(f"{str(figures[name]):>14}" for name in names))


if __name__ == "__main__":
    main()
