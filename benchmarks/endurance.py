"""Endurance: does a long run cost the same per turn as its first hour?

One `ouroboros run` on the scripted server: an 8k window, a task that never ends (read the
next of 50 files, keep a progress note every fifth turn), a session restarting whenever
the window fills (about every 25 turns: its small results free less by masking than a
prefix-caching server would process again), default retention. Every `--every`
turns the harness process is sampled: CPU per turn since the last sample (from
/proc/<pid>/stat), the restart pause over every restart since the last sample (session_end to
the next session_start, from the log, read each second so none is missed at a rollover; the
mean of the middle half, as the log's whole milliseconds would move a median of 3 or 4 ms in
steps of a third), RSS, and the bytes and files in the state dir. At the end `status`,
`runs`, `stats`, `logs -n 20` and `resume` (up to its first request) are timed on the
result: the least CPU of three processes and their peak RSS (os.wait4); resume's peak RSS is
set against the running harness's (the last sample).

Floors (issue 19, at 20,000 turns on a 2-core machine): CPU per turn and the restart pause
in the last sample at most 1.25x the sample at turns 1,000-2,000; RSS at most 1.1x; state
dir growth at most 1.5 KB a turn; `status` at most 0.4 s and `resume` at most 1 s of CPU;
resume's peak RSS within ~1.2x the running agent's.

    python benchmarks/endurance.py [--turns 20000] [--every 1000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from startup_cpu import ENV, FLOORS, cpu_and_rss, keep_bytecode  # this directory is on sys.path

FILES = 50
FILE_CHARS = 1000
WINDOW = 8192
STATE_BYTES_PER_TURN = 1500  # the floors not in startup_cpu.FLOORS (status, resume CPU)
RESUME_RSS_RATIO = 1.2
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
# Replies the scripted server has given: the turns, counted by the fake, not by the harness's
# own log (whose summary is part of what is measured).
REPLIES = [0]


def brain(messages: list[dict[str, Any]]) -> Any:
    """Read the next file; every fifth turn write a progress note instead."""
    from ouroboros.testing import Reply

    REPLIES[0] += 1
    turn = sum(1 for m in messages if m["role"] == "assistant")
    done = sum(1 for m in messages if m["role"] == "tool")
    if turn % 5 == 4:
        return Reply(
            "Saving progress.",
            [
                (
                    "file_write",
                    {"path": "progress.md", "content": f"read {done} files this session\n"},
                )
            ],
        )
    return Reply("Reading on.", [("file_read", {"path": f"data/{done % FILES:02d}.txt"})])


def make_project(root: Path, base_url: str, turns: int) -> Path:
    import tomli_w

    (root / "workspace" / "data").mkdir(parents=True)
    for i in range(FILES):
        line = f"file {i}: " + "lorem ipsum dolor sit amet " * 3
        text = "\n".join(line for _ in range(FILE_CHARS // len(line) + 1))
        (root / "workspace" / "data" / f"{i:02d}.txt").write_text(text[:FILE_CHARS])
    (root / "SYSTEM_PROMPT.md").write_text(
        "Read the files in data/, one a turn, forever; keep a progress note in progress.md.\n"
    )
    config = {
        "model": {"base_url": base_url, "name": "scripted", "context_limit": WINDOW},
        "agent": {"max_turns": turns},
        "context": {"keep_recent_observations": 1000, "carryover_turns": 2},
        "safety": {"sandbox": "off"},
    }
    (root / "ouroboros.toml").write_text(tomli_w.dumps(config))
    return root / "ouroboros.toml"


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def proc_rss_mb(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 1e6


def dir_usage(path: Path) -> tuple[int, int]:
    size = files = 0
    for dirpath, _, names in os.walk(path):
        for name in names:
            try:
                size += os.stat(os.path.join(dirpath, name)).st_size
                files += 1
            except OSError:
                pass
    return size, files


def turns_run(state_dir: Path) -> tuple[int, dict[str, float]]:
    """Turns so far as the log counts them (the manifest and current segment only) and the
    restart pauses (s) in the current segment, by the time of the session_start that ended
    each."""
    from ouroboros.store.log import list_runs, read_tail, runs_dir

    runs = list_runs(state_dir)
    if not runs:
        return 0, {}
    tail = read_tail(runs_dir(state_dir) / runs[-1])
    pauses: dict[str, float] = {}
    ended = None
    for record in tail.records:
        if record["type"] == "session_end" and record.get("reason") == "restart":
            ended = record["ts"]
        elif record["type"] == "session_start" and ended:
            pauses[record["ts"]] = seconds(record["ts"]) - seconds(ended)
            ended = None
    return tail.summary().assistants, pauses


def seconds(ts: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def run_sampled(config: Path, state_dir: Path, server: Any, every: int) -> list[dict[str, Any]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "ouroboros", "run", "--config", str(config), "--headless"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    samples: list[dict[str, Any]] = []
    last_cpu, last_turns, next_at = 0.0, 0, every
    pauses: dict[str, float] = {}  # every restart since the last sample, polled before a rollover
    while process.poll() is None:
        time.sleep(1.0)
        server.requests.clear()  # the fake's record of requests, not the harness's
        try:
            cpu, rss = proc_cpu(process.pid), proc_rss_mb(process.pid)
        except OSError:
            break
        if not rss:  # exiting: its memory is gone already
            break
        turns = REPLIES[0]
        pauses.update(turns_run(state_dir)[1])
        if turns >= next_at:
            size, files = dir_usage(state_dir)
            pause = middle_mean(list(pauses.values()))
            samples.append(
                {
                    "turns": turns,
                    "cpu_ms": 1000 * (cpu - last_cpu) / max(turns - last_turns, 1),
                    "pause_ms": 1000 * pause,
                    "restarts": len(pauses),
                    "rss_mb": rss,
                    "mb": size / 1e6,
                    "files": files,
                }
            )
            print(table_row(samples[-1]), flush=True)
            last_cpu, last_turns, next_at = cpu, turns, (turns // every + 1) * every
            pauses = {}
    if process.wait() not in (0, 3):  # 3: paused at max_turns, as asked
        raise SystemExit(f"the run failed: {process.stderr.read()[-2000:]}")
    return samples


def least_of(command: list[str], server: Any | None = None, times: int = 3) -> tuple[float, float]:
    """The least CPU of `times` processes of `ouroboros COMMAND` (the first may compile the
    bytecode) and the most peak RSS of them."""
    measured = [cpu_and_rss(command, server, ENV) for _ in range(times)]
    return min(cpu for cpu, _ in measured), max(rss for _, rss in measured)


def middle_mean(values: list[float]) -> float:
    """The mean of the middle half of `values` (0 for none): steady against a stray slow
    restart, and finer than the whole milliseconds each value is made of."""
    ordered = sorted(values)
    quarter = len(ordered) // 4
    middle = ordered[quarter : len(ordered) - quarter]
    return statistics.mean(middle) if middle else 0.0


def table_row(s: dict[str, Any]) -> str:
    return (
        f"| {s['turns']:>6,} | {s['cpu_ms']:>6.1f} | {s['pause_ms']:>6.1f} | "
        f"{s['rss_mb']:>6.1f} | {s['mb']:>7.2f} | {s['files']:>6,} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20_000)
    parser.add_argument("--every", type=int, default=1_000)
    parser.add_argument(
        "--keep",
        type=Path,
        help="make the project here and keep it "
        "(an empty or new directory), to time readers on it afterwards",
    )
    args = parser.parse_args()
    from ouroboros.testing import ScriptedServer

    with (
        tempfile.TemporaryDirectory() as tmp,
        ScriptedServer(brain, context_length=WINDOW) as server,
    ):
        root = args.keep or Path(tmp)
        keep_bytecode()
        config = make_project(root, server.base_url, args.turns)
        print("| turns | CPU ms/turn | restart pause ms | RSS MB | state dir MB | files |")
        print("|---:|---:|---:|---:|---:|---:|")
        samples = run_sampled(config, root / ".ouroboros", server, args.every)
        size, _ = dir_usage(root / ".ouroboros")
        turns, logged = REPLIES[0], turns_run(root / ".ouroboros")[0]
        if logged != turns:
            print(f"the log counts {logged:,} turns; the server gave {turns:,} replies")
        print(
            f"\nstate dir: {size / 1e6:.1f} MB after {turns:,} turns "
            f"({size / max(turns, 1):.0f} B a turn; "
            f"{verdict(size / max(turns, 1), STATE_BYTES_PER_TURN)})"
        )
        readers = {
            "status": ["status"],
            "runs": ["runs"],
            "stats": ["stats"],
            "logs -n 20": ["logs", "-n", "20"],
        }
        for name, command in readers.items():
            cpu, rss = least_of([*command, "--config", str(config)])
            floor = f"; {verdict(cpu, FLOORS[name])}" if name in FLOORS else ""
            print(f"{name:>12}: {cpu:.2f} s CPU, {rss:.0f} MB peak RSS{floor}")
        cpu, rss = least_of(
            ["resume", "--config", str(config), "--headless", "--max-turns", str(args.turns + 10)],
            server,
        )
        print(
            f"{'resume':>12}: {cpu:.2f} s CPU to its first request, {rss:.0f} MB peak RSS; "
            f"{verdict(cpu, FLOORS['resume (to its first request)'])}"
        )
        if samples:
            running = max(s["rss_mb"] for s in samples)
            print(
                f"resume peak RSS / running harness RSS: {rss:.0f} / {running:.0f} MB = "
                f"{rss / running:.2f}x ({verdict(rss / running, RESUME_RSS_RATIO)})"
            )
        print(json.dumps({"samples": samples}))
        floors(samples)


def floors(samples: list[dict[str, Any]]) -> None:
    """The issue's ratios, between the second sample and the last."""
    if len(samples) < 3:
        print("(too few samples for the floors: run with more --turns or a smaller --every)")
        return
    base, last = samples[1], samples[-1]
    for key, limit in (("cpu_ms", 1.25), ("pause_ms", 1.25), ("rss_mb", 1.1)):
        ratio = last[key] / base[key] if base[key] else float("nan")
        print(
            f"{key}: last {last[key]:.1f} / second sample {base[key]:.1f} = {ratio:.2f}x "
            f"({verdict(ratio, limit)})"
        )


def verdict(value: float, floor: float) -> str:
    """The floor and whether `value` keeps to it (at most the floor)."""
    return f"floor {floor:,g}: {'holds' if value <= floor else 'over'}"


if __name__ == "__main__":
    main()
