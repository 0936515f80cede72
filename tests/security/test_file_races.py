"""The file tools under attack: a directory swapped for a symlink while they run, hard links
to files outside, and files that are huge, growing or not files at all."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from ouroboros.protocols import ToolResult
from ouroboros.tools import FileRead, FileWrite

CALLS = 2000
RACE_SECS = 3.0
MAX_READ = 50_000

SWAPPER = """
import os, sys
workspace, outside = sys.argv[1], sys.argv[2]
real, swapped = os.path.join(workspace, "d"), os.path.join(workspace, "d.real")
stop, swaps = os.path.join(workspace, "..", "stop"), 0

def place(make):
    for attempt in range(1000):
        try:
            return make()
        except OSError:  # a tool made a new d while the real one was away: put it aside
            try:
                os.rename(real, os.path.join(workspace, f"made{swaps}-{attempt}"))
            except OSError:
                pass
    make()

print("swapping", flush=True)
while not os.path.exists(stop):
    os.rename(real, swapped)
    place(lambda: os.symlink(outside, real))
    os.unlink(real)
    place(lambda: os.rename(swapped, real))
    swaps += 1
print(swaps, flush=True)
"""

GROWER = """
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
block = b"x\\n" * 32768
for _ in range(4096):  # 256 MiB at most, about 100 MB/s
    os.write(fd, block)
    time.sleep(0.0005)
"""


def run(tool: Any, **arguments: Any) -> ToolResult:
    return asyncio.run(tool.run(arguments))


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "f.txt").write_text("OUTSIDE\n")
    (directory / "secret.txt").write_text("TOP SECRET\n")
    return directory


def test_a_directory_swapped_for_a_symlink_never_lets_a_call_outside(
    workspace: Path, outside: Path
) -> None:
    (workspace / "d").mkdir()
    (workspace / "d" / "f.txt").write_text("INSIDE\n")
    events: list[dict[str, Any]] = []
    reader = FileRead(workspace, max_read_bytes=MAX_READ, on_security=events.append)
    writer = FileWrite(workspace, on_security=events.append)
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(workspace), str(outside)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    read_outside = read_inside = 0
    try:
        assert swapper.stdout is not None and swapper.stdout.readline() == "swapping\n"
        deadline = time.monotonic() + RACE_SECS
        for call in range(CALLS // 2):
            if time.monotonic() > deadline:
                break
            content = run(reader, path="d/f.txt").content
            read_outside += "OUTSIDE" in content
            read_inside += content == "INSIDE\n"
            run(writer, path=f"d/w{call}.txt", content="written")
    finally:
        (workspace.parent / "stop").touch()
        swaps, trouble = swapper.communicate(timeout=10)
    assert swapper.returncode == 0 and int(swaps) > 100, trouble  # it swapped all along
    assert read_outside == 0
    assert sorted(os.listdir(outside)) == ["f.txt", "secret.txt"]  # nothing written there
    assert read_inside > 0  # the race really ran both ways


def test_a_hard_link_to_a_file_outside_is_not_read(workspace: Path, outside: Path) -> None:
    os.link(outside / "secret.txt", workspace / "linked.txt")
    events: list[dict[str, Any]] = []
    reader = FileRead(workspace, max_read_bytes=MAX_READ, on_security=events.append)

    result = run(reader, path="linked.txt")

    assert not result.ok
    assert "TOP SECRET" not in result.content
    assert result.content == (
        "error: linked.txt has 2 hard links, and a file with more than one may be a file "
        "outside the workspace; file_read only reads files with one link"
    )
    assert events == [{"kind": "hard_link", "tool": "file_read", "path": "linked.txt"}]
    written = run(
        FileWrite(workspace, on_security=events.append), path="linked.txt", content="mine"
    )
    assert written.ok and (workspace / "linked.txt").read_text() == "mine"
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"  # the link was replaced


def returned_within(seconds: float, work) -> list:
    """What `work()` returned, run on a thread; empty if it had not returned by then."""
    results: list = []
    thread = threading.Thread(target=lambda: results.append(work()), daemon=True)
    thread.start()
    thread.join(timeout=seconds)
    return results


def test_a_200_mb_line_is_read_in_bounded_memory(workspace: Path) -> None:
    huge = workspace / "huge.txt"
    with huge.open("wb") as handle:  # text at the start, then a sparse run without newlines
        handle.write(b"x" * 16384)
        handle.truncate(200 << 20)
    reader = FileRead(workspace, max_read_bytes=MAX_READ, on_security=lambda _: None)
    tracemalloc.start()
    try:
        result = run(reader, path="huge.txt")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.ok
    assert result.content.startswith("x" * 16384)
    assert "[line 1 is longer than 50000 bytes and only its start is shown" in result.content
    assert peak < 4 << 20, f"peak {peak / 1e6:.1f} MB"


def test_a_growing_file_and_a_fifo_return_promptly(workspace: Path) -> None:
    growing = workspace / "growing.log"
    growing.write_bytes(b"start\n")
    os.mkfifo(workspace / "pipe")
    reader = FileRead(workspace, max_read_bytes=MAX_READ, on_security=lambda _: None)
    grower = subprocess.Popen([sys.executable, "-c", GROWER, str(growing)])
    try:
        while growing.stat().st_size < 1 << 20:
            time.sleep(0.005)
        # one that followed the growth, or waited for a writer, would never return
        results = returned_within(30, lambda: run(reader, path="growing.log"))
    finally:
        grower.kill()
        grower.wait()
    assert results, "file_read of a growing file did not return"
    assert results[0].content.startswith("start\nx\nx\n")
    fifo = returned_within(30, lambda: run(reader, path="pipe"))
    assert fifo and fifo[0].content == "error: pipe is not a regular file"
