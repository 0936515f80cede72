"""The harness's own small files (the lock, the heartbeat, the manifest, the snapshot, the
inbox's letters), read without following a link: a symlink planted where one of them should
be, a FIFO or a device is refused, never opened through, and at most `limit` bytes are read.

    data = read_regular(state_dir / "heartbeat", limit=64 * 1024)   # OSError if refused
    box = open_dir(state_dir / "inbox", make=True)                   # an fd, never via a link
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def kind_of(mode: int) -> str:
    """What a file is, in a word for a message: "a symbolic link", "a FIFO", ..."""
    kinds = (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((word for test, word in kinds if test(mode)), "not a regular file")


class Refused(OSError):
    """A file the harness will not use (a link, a FIFO, a device where a file should be):
    `strerror` says why, `filename` names it."""


def refused(path: Path | str, why: str) -> Refused:
    return Refused(errno.EPERM, why, str(path))


def open_regular(
    path: Path | str, flags: int = READ_FLAGS, mode: int = 0o644, *, dir_fd: int | None = None
) -> int:
    """An fd on the regular file at `path`, opened without following a link in its last
    component (a FIFO is not waited on). Raises OSError: the OS's, or one saying the file is
    a link, a FIFO, a device or a directory (it is then closed, never read or written)."""
    try:
        fd = os.open(
            path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=dir_fd
        )
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise refused(
                path,
                "it is a symbolic link, and the harness does not follow "
                "one there; it should be a regular file",
            ) from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise refused(path, f"it is {kind_of(info.st_mode)}; it should be a regular file")
    return fd


def no_follow(path: str, flags: int) -> int:
    """An `opener` for `open()` that does not follow a link in the last component:
    `open(path, "ab", opener=no_follow)` raises OSError (ELOOP) on a symbolic link."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)


def read_fd(fd: int, path: Path | str, limit: int) -> bytes:
    """The whole file `fd` is open on, at most `limit` bytes; OSError (EFBIG) if it holds
    more."""
    chunks, size = [], 0
    while size <= limit:
        chunk = os.read(fd, min(limit + 1 - size, 1 << 20))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
    raise OSError(
        errno.EFBIG,
        f"it holds more than {limit:,} bytes, more than such a file ever holds",
        str(path),
    )


def read_prefix(fd: int, size: int) -> bytes:
    """The first `size` bytes of the file `fd` is open on (fewer if it is shorter): what a
    log held when it was opened, however fast it grows meanwhile."""
    chunks, got = [], 0
    while got < size:
        chunk = os.pread(fd, min(size - got, 1 << 24), got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_regular(path: Path | str, limit: int, *, dir_fd: int | None = None) -> bytes:
    """The bytes of the regular file at `path` (see open_regular), at most `limit`."""
    fd = open_regular(path, dir_fd=dir_fd)
    try:
        return read_fd(fd, path, limit)
    finally:
        os.close(fd)


def make_private_dir(path: Path) -> None:
    """Make the directory at `path` (its parents as need be) with mode 0700 if it is missing:
    a state dir the harness makes is its user's alone."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass


def open_dir(path: Path | str, *, make: bool = False) -> int:
    """An fd on the directory at `path`, made (mode 0700) first when `make` and it is
    missing; OSError saying so when it is a symbolic link (never followed) or no directory."""
    if make:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    try:
        return os.open(path, DIR_FLAGS)
    except OSError as error:
        if error.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            raise error from None
        raise refused(
            path,
            f"it is {kind_of(mode)}; the harness keeps a directory of its own there: remove it",
        ) from None
