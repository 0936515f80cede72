"""Starting a command confined: the system calls, and the two ways to make them.

Landlock, capabilities, no-new-privileges and network namespaces all belong to a thread, and
a child inherits its thread's. So the usual way is a `Confiner`: a fresh thread per command
confines itself and starts the command with vfork, as unconfined Python would, and then ends;
the harness's own threads are never touched. It costs a thread (~0.1 ms) where running code
in a forked child would cost a full fork of the harness (several ms in a 50 MB process).
A user namespace can be neither made nor entered by a thread of a process that has several,
so a non-root harness that cuts the network starts each command through an exec helper that
enters the run's namespaces (userns.py).

    confiner = Confiner(ruleset, netns=fd, drop_capabilities=True)
    process = confiner.spawn(["/bin/sh", "-c", "make"], cwd=ws, stdout=PIPE, ...)
"""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ouroboros.sandbox import landlock, mounts, seccomp

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
CLONE_FS = 0x00000200
PR_CAPBSET_DROP = 24
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def last_capability() -> int:
    try:
        return int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        return 40


def drop_capabilities(libc: ctypes.CDLL, last: int) -> None:
    """Give up every capability, for good: the bounding set, then effective and permitted.
    A root process keeps its uid but can no longer read what root alone may, nor other
    processes' /proc/<pid>/environ (Landlock alone does not stop root from that)."""
    for capability in range(last + 1):
        libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0)
    header, data = _CapHeader(CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _check(libc.capset(ctypes.byref(header), data), "capset")


def loopback_up(libc: ctypes.CDLL) -> None:
    """Bring up `lo` in a fresh network namespace (it starts down)."""
    sock = libc.socket(2, 2, 0)  # AF_INET, SOCK_DGRAM
    _check(sock, "socket")
    try:
        request = ctypes.create_string_buffer(b"lo", 40)  # struct ifreq
        _check(libc.ioctl(sock, SIOCGIFFLAGS, request), "SIOCGIFFLAGS")
        flags = int.from_bytes(request.raw[16:18], "little") | IFF_UP
        ctypes.memmove(ctypes.addressof(request) + 16, flags.to_bytes(2, "little"), 2)
        _check(libc.ioctl(sock, SIOCSIFFLAGS, request), "SIOCSIFFLAGS")
    finally:
        os.close(sock)


def in_thread(work: Any) -> Any:
    """Run `work()` in a fresh thread that ends with it; return or raise what it did. The
    garbage collector is held off meanwhile, so no finalizer of the harness's runs confined."""
    outcome: dict[str, Any] = {}

    def body() -> None:
        try:
            outcome["value"] = work()
        except BaseException as error:  # handed to the caller
            outcome["error"] = error

    collecting = gc.isenabled()
    gc.disable()
    try:
        thread = threading.Thread(target=body, name="ouroboros-confined", daemon=True)
        thread.start()
        thread.join()
    finally:
        if collecting:
            gc.enable()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def private_network() -> int:
    """A new network namespace with loopback up, made by a thread that then ends; the
    returned file descriptor keeps it for the run (root only: CAP_SYS_ADMIN)."""

    def make() -> int:
        libc = _libc()
        _check(libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        loopback_up(libc)
        return os.open(
            f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY | os.O_CLOEXEC
        )

    return in_thread(make)


@dataclass
class Confiner:
    """Confines a fresh thread per command, which then starts it."""

    ruleset: landlock.Ruleset
    netns: int = -1  # a network namespace to enter (private_network), or -1
    drop_capabilities: bool = False
    last_capability: int = 40
    libc: ctypes.CDLL = field(default_factory=_libc)
    mountns: int = -1  # a mount namespace hiding the unix sockets (mounts.private_mounts)
    refuse_unix: bool = False  # else a seccomp filter refusing unix sockets

    @property
    def sockets(self) -> str:
        """How unix sockets outside the workspace are kept out of reach: "namespace",
        "seccomp" or "" (they are not)."""
        return "namespace" if self.mountns >= 0 else "seccomp" if self.refuse_unix else ""

    def confine_this_thread(self) -> None:
        if self.netns >= 0:
            _check(self.libc.setns(self.netns, CLONE_NEWNET), "setns")
        if self.mountns >= 0:
            _check(self.libc.unshare(CLONE_FS), "unshare(CLONE_FS)")
            _check(self.libc.setns(self.mountns, mounts.CLONE_NEWNS), "setns(mount)")
        if self.drop_capabilities:
            drop_capabilities(self.libc, self.last_capability)
        self.ruleset.restrict_self()
        if self.refuse_unix:
            seccomp.refuse_unix_sockets(self.libc)

    def spawn(self, args: list[str], **popen: Any) -> subprocess.Popen[bytes]:
        def start() -> subprocess.Popen[bytes]:
            self.confine_this_thread()
            return subprocess.Popen(args, **popen)

        return in_thread(start)

    def close(self) -> None:
        self.ruleset.close()
        for name in ("netns", "mountns"):
            if getattr(self, name) >= 0:
                os.close(getattr(self, name))
                setattr(self, name, -1)
