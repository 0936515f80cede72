"""Resume time: how long reading a run back takes when its log holds 10,000 events.

python benchmarks/resume_time.py [--events 10000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from ouroboros.config import ContextConfig
from ouroboros.loop.resume import recover
from ouroboros.loop.state import RunState
from ouroboros.store import events as ev
from ouroboros.store.log import EVENTS_FILE, EventLog
from ouroboros.store.state_file import write_state
from ouroboros.window.manager import ContextManager


def make_run(run_dir: Path, events: int) -> None:
    log = EventLog(run_dir / EVENTS_FILE)
    log.emit(ev.RunStart(run_id=run_dir.name, version="0", pid=1, config={}))
    context = ContextManager.create(8192, "benchmark", 1024, ContextConfig())
    messages = [{"role": "system", "content": "mission " * 200}]
    while log.seq < events:
        call_id = f"call_{log.seq}"
        call = ev.LoggedCall(id=call_id, name="file_read", arguments='{"path": "a.txt"}')
        log.emit(
            ev.Assistant(
                text="Reading the next file.", finish_reason="tool_calls", tool_calls=[call]
            )
        )
        log.emit(ev.ToolCallEvent(**call.model_dump()))
        log.emit(
            ev.ToolResultEvent(
                id=call_id,
                name="file_read",
                ok=True,
                bytes=4000,
                duration_ms=1,
                observation="obs-1",
                truncated=False,
                summary="KEY: 1",
            )
        )
        log.emit(
            ev.TokenUsage(
                prompt_tokens=4000,
                completion_tokens=20,
                total_tokens=4020,
                context_limit=8192,
                budget=7168,
                context_used_pct=55.8,
                source="server",
            )
        )
    messages += [{"role": "user", "content": "x" * 4000} for _ in range(20)]
    state = RunState(run_dir.name, messages, context, total_turns=events // 4)
    write_state(run_dir, log.seq, state.to_dict())
    log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "runs" / "bench"
        make_run(run_dir, args.events)
        size = (run_dir / EVENTS_FILE).stat().st_size
        times = []
        for _ in range(5):
            started = time.perf_counter()
            recovered = recover(run_dir, ContextConfig())
            times.append(time.perf_counter() - started)
        print(f"log: {recovered.seq:,} events, {size / 1e6:.1f} MB")
        print(
            f"resume (read log + snapshot): best {min(times) * 1000:.0f} ms, "
            f"worst {max(times) * 1000:.0f} ms over 5 runs"
        )


if __name__ == "__main__":
    main()
