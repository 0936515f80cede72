"""The agent's memory file under attack: pinning NOTES.md must never put a file from outside
the workspace in the system message, whatever the agent's jobs do to the name meanwhile."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from ouroboros.loop.memory import Unpinnable, read_pinned

SECRET = "TOP SECRET, NOT FOR THE AGENT"
READS = 3000  # pinnings tried while the name is swapped


@pytest.fixture
def rooms(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace, and a secret file outside it."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET + "\n")
    return workspace, secret


def pin(workspace: Path) -> str | None:
    return read_pinned(workspace, "NOTES.md", 1000, 4.0).text


def test_a_link_out_of_the_workspace_is_not_pinned(rooms: tuple[Path, Path]) -> None:
    workspace, secret = rooms
    (workspace / "NOTES.md").symlink_to(secret)
    with pytest.raises(Unpinnable, match="NOTES.md leads outside the workspace"):
        pin(workspace)


def test_a_link_inside_the_workspace_is_pinned(rooms: tuple[Path, Path]) -> None:
    workspace, _ = rooms
    (workspace / "notes").mkdir()
    (workspace / "notes" / "mine.md").write_text("learned: the build needs make\n")
    (workspace / "NOTES.md").symlink_to("notes/mine.md")
    assert pin(workspace) == "learned: the build needs make\n"


def test_a_hard_link_to_a_file_outside_is_not_pinned(rooms: tuple[Path, Path]) -> None:
    workspace, secret = rooms
    try:
        os.link(secret, workspace / "NOTES.md")
    except OSError as error:
        pytest.skip(f"cannot hard-link here: {error.strerror}")
    with pytest.raises(Unpinnable, match="NOTES.md has 2 hard links"):
        pin(workspace)


def test_a_fifo_is_refused_without_waiting_for_a_writer(rooms: tuple[Path, Path]) -> None:
    workspace, _ = rooms
    os.mkfifo(workspace / "NOTES.md")
    with pytest.raises(Unpinnable, match="NOTES.md is not a regular file"):
        pin(workspace)


def test_a_device_is_refused(rooms: tuple[Path, Path]) -> None:
    workspace, _ = rooms
    try:
        os.mknod(workspace / "NOTES.md", 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero
    except OSError as error:
        pytest.skip(f"cannot make a device here: {error.strerror}")
    with pytest.raises(Unpinnable, match="NOTES.md is not a regular file"):
        pin(workspace)


def test_a_name_swapped_between_a_file_and_a_link_never_pins_the_secret(
    rooms: tuple[Path, Path],
) -> None:
    workspace, secret = rooms
    notes, stop = workspace / "NOTES.md", threading.Event()
    notes.write_text("my notes\n")

    def swap() -> None:
        while not stop.is_set():
            (workspace / "link").symlink_to(secret)
            os.replace(workspace / "link", notes)
            (workspace / "file").write_text("my notes\n")
            os.replace(workspace / "file", notes)

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    seen: set[str] = set()
    try:
        for _ in range(READS):
            try:
                seen.add(pin(workspace) or "")
            except Unpinnable as why:
                seen.add(str(why))
    finally:
        stop.set()
        swapper.join(timeout=10)
    assert not any(SECRET in text for text in seen), seen
    assert "my notes\n" in seen  # the race did run: the file was pinned between swaps
