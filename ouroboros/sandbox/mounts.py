"""Hiding the machine's unix sockets from a command: a mount namespace of its own in which
`/run` (and `/var/run`), `/tmp`, `/var/tmp`, `/dev/shm`, `/srv`, `/var/lib` and the home
directory are empty private tmpfs mounts, with
only what the command needs (the workspace, its private temp dir, the Python installation, a
PATH entry under home) bound back at the same paths.

A pathname unix socket (the user's D-Bus and systemd manager, ssh-agent, tmux, docker.sock)
is reached by its path, and Landlock does not govern `connect` on one; in this namespace the
path does not exist. Made once per run by a thread of a root harness (`private_mounts`, kept
by its file descriptor and entered per command with setns), or in the forked child of a
non-root harness, inside the user namespace it makes (`hide`).

    fd = private_mounts(hidden_dirs(home), keep=[workspace, private_tmp, ...])
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x1000, 0x4000, 0x40000

# Where daemons and other users leave pathname unix sockets: the runtime dirs, the shared
# temp dirs, shared memory, services' state and data.
SOCKET_DIRS = ("/run", "/var/run", "/tmp", "/var/tmp", "/dev/shm", "/srv", "/var/lib")


def hidden_dirs(home: Path | None, candidates: Iterable[str] = SOCKET_DIRS) -> list[Path]:
    """The directories to hide: those of `candidates` and `home` that are real directories
    (a symlink such as /var/run -> /run is covered by its target), never `/`."""
    found: list[Path] = []
    for name in [*candidates, *([str(home)] if home is not None else [])]:
        path = Path(name)
        if path == Path("/") or path.is_symlink() or not path.is_dir():
            continue
        if path.resolve() not in found:
            found.append(path.resolve())
    return found


def plan(hidden: Sequence[Path], keep: Iterable[Path]) -> list[tuple[Path, list[Path]]]:
    """Each directory to hide, with the paths under it to bind back (outermost only). A
    directory that is itself kept, or inside a kept path, is left alone; one inside another
    to hide goes with it."""
    kept = sorted({Path(p) for p in keep}, key=lambda p: len(p.parts))
    steps = []
    for directory in hidden:
        if any(directory.is_relative_to(k) for k in kept):
            continue
        if any(directory != h and directory.is_relative_to(h) for h in hidden):
            continue  # inside another hidden directory (a home under /tmp): hidden with it
        inside: list[Path] = []
        for path in kept:
            if path.is_relative_to(directory) and not any(path.is_relative_to(i) for i in inside):
                inside.append(path)
        steps.append((directory, inside))
    return steps


def _check(result: int, what: str) -> None:
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def _mount(
    libc: ctypes.CDLL,
    source: str | None,
    target: Path,
    fstype: str | None,
    flags: int,
    data: str | None = None,
) -> None:
    _check(
        libc.mount(
            source and source.encode(),
            os.fsencode(target),
            fstype and fstype.encode(),
            ctypes.c_ulong(flags),
            data and data.encode(),
        ),
        f"mount {target}",
    )


def _bind_back(libc: ctypes.CDLL, path: Path, fd: int) -> None:
    os.makedirs(path.parent, exist_ok=True)
    if os.path.isdir(f"/proc/self/fd/{fd}"):
        os.makedirs(path, exist_ok=True)
    else:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
    _mount(libc, f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)


def hide(libc: ctypes.CDLL, steps: list[tuple[Path, list[Path]]]) -> None:
    """In a mount namespace of the caller's own (just unshared): mounts made private, then
    each directory covered by an empty tmpfs with its kept paths bound back. The working
    directory is entered again by its path, so it is the bound copy: the one it had lies on
    the covered mount, where `..` would still lead to what is hidden."""
    cwd = os.getcwd()
    _mount(libc, None, Path("/"), None, MS_REC | MS_PRIVATE)
    for directory, inside in steps:
        fds = []
        try:
            for path in inside:
                try:
                    fds.append((path, os.open(path, os.O_PATH | os.O_CLOEXEC)))
                except FileNotFoundError:
                    continue
            _mount(libc, "tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
            for path, fd in fds:
                _bind_back(libc, path, fd)
        finally:
            for _, fd in fds:
                os.close(fd)
    try:
        os.chdir(cwd)
    except OSError:
        os.chdir("/")


def private_mounts(steps: list[tuple[Path, list[Path]]], libc: ctypes.CDLL) -> int:
    """A mount namespace hiding `steps`, made by a thread that then ends; the returned file
    descriptor keeps it for the run (root only: CAP_SYS_ADMIN). Raises OSError."""
    outcome: dict[str, object] = {}

    def make() -> None:
        try:
            _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
            hide(libc, steps)
            outcome["fd"] = os.open(
                f"/proc/self/task/{threading.get_native_id()}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC
            )
        except OSError as error:
            outcome["error"] = error

    thread = threading.Thread(target=make, name="ouroboros-mounts", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["fd"]  # type: ignore[return-value]
