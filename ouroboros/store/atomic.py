"""Replacing a file so that a crash leaves either the old content or the new, never a mix."""

from __future__ import annotations

import os
import stat
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ouroboros.errors import StateError

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def replace_in(directory: int, name: str, data: bytes, *, durable: bool) -> None:
    """Write `data` to a temporary file in the directory fd `directory`, then rename it over
    `name` there, keeping the permissions of the regular file it replaces. `durable` syncs the
    file and the directory, so the new content survives a power cut too."""
    temporary = f".ouroboros-{uuid.uuid4().hex[:12]}.tmp"
    fd = os.open(temporary, _CREATE, 0o666, dir_fd=directory)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            try:
                mode = os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode
            except FileNotFoundError:
                mode = None
            if mode is not None and stat.S_ISREG(mode):
                os.fchmod(fd, stat.S_IMODE(mode))
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        try:
            os.unlink(temporary, dir_fd=directory)
        except OSError:
            pass
        raise
    if durable:
        os.fsync(directory)


def write_atomically(path: Path, text: str, *, durable: bool = True) -> None:
    """Replace the file at `path` with `text` (UTF-8), durably unless told otherwise."""
    directory = open_directory(path.parent)
    try:
        replace_in(directory, path.name, text.encode("utf-8"), durable=durable)
    finally:
        os.close(directory)


def open_directory(path: Path) -> int:
    """A file descriptor of the directory at `path`, for replace_in and sync_in."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def sync_in(directory: int, name: str) -> None:
    """Make the file `name` in the directory fd `directory`, written before without syncing,
    and its directory entry survive a power cut."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.fsync(directory)


@contextmanager
def cannot_write(path: Path) -> Iterator[None]:
    """Turn a failed write (a full disk, `ulimit -f`, a read-only state dir) into one line."""
    try:
        yield
    except OSError as error:
        raise write_failure(path, error) from None


def write_failure(path: Path | str, error: OSError) -> StateError:
    return StateError(
        f"cannot write {path}: {error.strerror or error}; what was written "
        "before is kept: fix that (free space, a file size limit, "
        "permissions), then `ouroboros resume` continues the run"
    )
