"""Paths inside the workspace, opened without ever leaving it.

A path is walked one component at a time from a directory fd of the workspace root, each
component opened relative to its parent's fd with O_NOFOLLOW. A symlink is read and its target
walked the same way (at most MAX_LINKS of them per path); `..` closes a directory the walk
itself opened, never past the root. No check is ever separated from its use, so a job swapping
a directory for a symlink to `/etc` mid-call makes the call fail, never reach outside.

    with Workspace(root).walk("notes/a.md", final=FINAL_FILE) as found:
        os.read(found.fd, 100)
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ouroboros.tools.safety import PathEscape

MAX_LINKS = 40  # symlinks followed in one path, as the kernel's ELOOP limit
RACE_RETRIES = 8  # times one component is tried again when it changes as it is opened

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | _CLOEXEC

Ending = Literal["file", "dir", "entry"]
FINAL_FILE: Ending = "file"  # open the last component for reading
FINAL_DIR: Ending = "dir"  # open it as a directory
FINAL_ENTRY: Ending = "entry"  # leave it unopened: its directory's fd and its name


class _Refused(Exception):
    def __init__(self, shown: str) -> None:
        super().__init__(shown)
        self.shown = shown


class Missing(_Refused):
    """A component of the path does not exist; `shown` is the whole path asked for."""


class NotADirectory(_Refused):
    """A component that should be a directory is something else; `shown` names it."""


@dataclass
class Found:
    """Where a walk ended: `fd` is the opened file or directory (FINAL_FILE, FINAL_DIR) or the
    directory holding `name` (FINAL_ENTRY); `parts` the path from the root, links resolved."""

    fd: int
    name: str | None
    parts: list[str] = field(default_factory=list)

    @property
    def shown(self) -> str:
        return "/".join(self.parts) or "."


def given_parts(root: Path, given: str) -> list[str]:
    """The components of a model-given path, relative to the workspace root: a relative path
    as it is, an absolute one inside the root (as written, or resolved) made relative.

        given_parts(Path("/ws"), "/ws/notes/a.md")  # -> ["notes", "a.md"]
    """
    if "\x00" in given:
        raise ValueError(f"path {given!r} contains a NUL byte")
    if not given.startswith("/"):
        return given.split("/")
    inside = absolute_inside(root, given)
    if inside is None:
        raise escape(root, given)
    return inside


def absolute_inside(root: Path, path: str) -> list[str] | None:
    """An absolute path's components under the root, or None if it lies outside. Tried as
    written, then resolved (a link outside the workspace may lead back into it); the walk
    that follows still opens every component itself."""
    resolved_root = root.resolve()
    for base, candidate in (
        (resolved_root, posixpath.normpath(path)),
        (Path(os.path.abspath(root)), posixpath.normpath(path)),
        (resolved_root, os.path.realpath(path)),
    ):
        relative = posixpath.relpath(candidate, base)
        if relative == ".":
            return []
        if relative != ".." and not relative.startswith("../"):
            return relative.split("/")
    return None


def escape(root: Path, given: str) -> PathEscape:
    return PathEscape(
        f"path {given!r} is outside the workspace ({root.resolve()}); "
        "use a path inside it, preferably relative to it"
    )


class Workspace:
    """The workspace root; every path is opened through `walk`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @contextmanager
    def walk(self, given: str, *, final: Ending, create_dirs: bool = False) -> Iterator[Found]:
        """Open `given` inside the workspace (see the module docstring); the fds it opened
        are closed when the block ends. Raises PathEscape, Missing, NotADirectory, ValueError
        (a loop of links) or OSError."""
        walker = _Walker(self.root, given, create_dirs)
        try:
            yield walker.run(final)
        finally:
            walker.close()


class _Walker:
    """One walk: the fds of the directories opened so far (the root first) and their names."""

    def __init__(self, root: Path, given: str, create_dirs: bool) -> None:
        self.root, self.given, self.create_dirs = root, given, create_dirs
        self.pending = deque(given_parts(root, given))
        self.fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)]
        self.names: list[str] = []
        self.links = 0
        self.extra_fd = -1

    def close(self) -> None:
        for fd in [*self.fds, self.extra_fd]:
            if fd >= 0:
                os.close(fd)
        self.fds, self.extra_fd = [], -1

    def run(self, final: Ending) -> Found:
        while True:
            name = self._next_name()
            if name is None:  # the path names a directory already opened
                return self._ended_at_directory(final)
            last = not self.pending
            if not last or final == FINAL_DIR:
                opened = self._open_dir(name)
                if opened is not None:
                    self.fds.append(opened)
                    self.names.append(name)
                continue
            if final == FINAL_FILE:
                fd = self._open_file(name)
                if fd is None:
                    continue
                self.extra_fd = fd
                return Found(fd, name, [*self.names, name])
            if not self._entry_is_link(name):
                return Found(self.fds[-1], name, [*self.names, name])

    def _next_name(self) -> str | None:
        while self.pending:
            name = self.pending.popleft()
            if name in ("", "."):
                continue
            if name == "..":
                if not self.names:
                    raise escape(self.root, self.given)
                os.close(self.fds.pop())
                self.names.pop()
                continue
            return name
        return None

    def _ended_at_directory(self, final: Ending) -> Found:
        if final == FINAL_ENTRY and not self.names:
            return Found(self.fds[-1], None, [])
        if final == FINAL_ENTRY:  # the directory's own entry, in its parent
            os.close(self.fds.pop())
            name = self.names.pop()
            return Found(self.fds[-1], name, [*self.names, name])
        self.extra_fd = os.dup(self.fds[-1])
        return Found(self.extra_fd, None, list(self.names))

    def _open_dir(self, name: str) -> int | None:
        """The directory `name` opened, or None when there is nothing to open: it was a link
        (its target is queued) or it is missing and followed by `..`."""
        for _ in range(RACE_RETRIES):
            try:
                return os.open(name, DIR_FLAGS, dir_fd=self.fds[-1])
            except FileNotFoundError:
                if self.pending and self.pending[0] == "..":  # `missing/..` is where it started
                    self.pending.popleft()
                    return None
                if not self.create_dirs:
                    raise Missing(self._shown_with(name)) from None
                try:
                    os.mkdir(name, dir_fd=self.fds[-1])
                except FileExistsError:
                    pass
                continue
            except OSError as error:
                if error.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise
            if self._follow(name):
                return None
            if not self._is_directory(name):
                raise NotADirectory("/".join([*self.names, name]))
        raise OSError(errno.EAGAIN, f"{self._shown_with(name)} keeps changing as it is opened")

    def _open_file(self, name: str) -> int | None:
        """The file `name` opened for reading, or None when it was a link (target queued)."""
        for _ in range(RACE_RETRIES):
            try:
                return os.open(name, FILE_FLAGS, dir_fd=self.fds[-1])
            except FileNotFoundError:
                raise Missing(self._shown_with(name)) from None
            except OSError as error:
                if error.errno != errno.ELOOP:
                    raise
            if self._follow(name):
                return None
        raise OSError(errno.EAGAIN, f"{self._shown_with(name)} keeps changing as it is opened")

    def _entry_is_link(self, name: str) -> bool:
        """Whether the last component is a link (then its target is queued); a missing one is
        a new entry."""
        try:
            mode = os.stat(name, dir_fd=self.fds[-1], follow_symlinks=False).st_mode
        except FileNotFoundError:
            return False
        return stat.S_ISLNK(mode) and self._follow(name)

    def _follow(self, name: str) -> bool:
        """Queue the target of the link `name`; False if `name` is no longer a link."""
        try:
            target = os.readlink(name, dir_fd=self.fds[-1])
        except OSError as error:
            if error.errno in (errno.EINVAL, errno.ENOENT):
                return False
            raise
        self.links += 1
        if self.links > MAX_LINKS:
            raise ValueError(
                f"path {self.given!r} cannot be resolved: too many levels of symbolic links"
            )
        if target.startswith("/"):
            inside = absolute_inside(self.root, target)
            if inside is None:
                raise escape(self.root, self.given)
            while len(self.fds) > 1:
                os.close(self.fds.pop())
            self.names = []
            self.pending.extendleft(reversed(inside))
        else:
            self.pending.extendleft(reversed(target.split("/")))
        return True

    def _is_directory(self, name: str) -> bool:
        try:
            return stat.S_ISDIR(os.stat(name, dir_fd=self.fds[-1], follow_symlinks=False).st_mode)
        except FileNotFoundError:
            return False

    def _shown_with(self, name: str) -> str:
        return posixpath.normpath("/".join([*self.names, name, *self.pending]))
