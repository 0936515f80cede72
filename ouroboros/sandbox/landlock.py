"""Linux Landlock through its three system calls (ctypes, no dependency): which ABI the kernel
offers, the access rights each ABI knows, and a ruleset built once and applied by each thread
(or child) that starts a command.

    abi = landlock.abi()                      # 0 where the kernel (or the OS) has none
    ruleset = landlock.Ruleset.build(abi, [("/usr", landlock.read_rights(abi)), ...])
    ruleset.restrict_self()                   # this thread and what it starts: irreversible

Landlock is an allow-list: once a ruleset is applied, the process and everything it starts can
open a path only through a rule granting that right on the path or a directory above it. A
restricted process also cannot ptrace, or read `/proc/<pid>/environ` or `mem` of, any process
outside its domain, even as root (ABI 1), cannot signal processes outside it (ABI 6), and, with
the network rights handled, cannot bind or connect TCP sockets (ABI 4).
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

# Syscall numbers are the same on every architecture since Linux 5.13.
SYS_CREATE_RULESET = 444
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446
CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

# Filesystem rights, and the ABI that introduced each.
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2: rename and link across directories
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5: ioctl on device files
ABI1_FS = (1 << 13) - 1
# Network rights (ABI 4) and scopes (ABI 6).
NET_BIND_TCP = 1 << 0
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

READ = EXECUTE | READ_FILE | READ_DIR
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # all a file rule may hold


def handled_fs(abi: int) -> int:
    """Every filesystem right the kernel's ABI knows: all of them are denied unless granted."""
    rights = ABI1_FS if abi >= 1 else 0
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def read_rights(abi: int) -> int:
    return READ & handled_fs(abi)


def write_rights(abi: int) -> int:
    """Everything on a directory tree: read, write, create, remove, rename, truncate."""
    return handled_fs(abi)


def device_rights(abi: int) -> int:
    """A device file such as /dev/null: read, write, truncate (`> /dev/null`) and ioctl."""
    return (READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV) & handled_fs(abi)


def handled_net(abi: int, network: bool) -> int:
    """TCP bind and connect are denied (no rule grants them) when the network is cut."""
    return NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 and not network else 0


def scopes(abi: int) -> int:
    return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _attr_size(abi: int) -> int:
    """The struct as the ABI knows it: a kernel refuses fields it does not know."""
    return 24 if abi >= 6 else 16 if abi >= 4 else 8


@cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _syscall(number: int, *args: object) -> int:
    libc = _libc()
    if libc is None:
        raise OSError(38, "not Linux")
    result = libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))
    return result


@cache
def abi() -> int:
    """The Landlock ABI version the kernel offers; 0 when it has none (not Linux, a kernel
    before 5.13, Landlock left out of the `lsm=` boot list, or a seccomp filter refusing it)."""
    try:
        return _syscall(
            SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION)
        )
    except OSError:
        return 0


@dataclass
class Ruleset:
    """A ruleset file descriptor ready to apply. Built once per run; `restrict_self` is the
    only call made where it applies."""

    fd: int
    abi: int

    @classmethod
    def build(cls, abi: int, rules: list[tuple[Path, int]], *, network: bool = True) -> Ruleset:
        """A ruleset granting each `(path, rights)`; missing paths are skipped. Raises OSError."""
        attr = _RulesetAttr(handled_fs(abi), handled_net(abi, network), scopes(abi))
        fd = _syscall(
            SYS_CREATE_RULESET,
            ctypes.byref(attr),
            ctypes.c_size_t(_attr_size(abi)),
            ctypes.c_uint32(0),
        )
        try:
            for path, rights in rules:
                _add_rule(fd, path, rights)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, abi)

    def restrict_self(self) -> None:
        """Confine the calling thread (only it: Landlock before ABI 8 never touches the other
        threads) and all it starts from now on. Irreversible."""
        libc = _libc()
        assert libc is not None
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        _syscall(SYS_RESTRICT_SELF, ctypes.c_int(self.fd), ctypes.c_uint32(0))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _add_rule(ruleset_fd: int, path: Path, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if not os.path.isdir(path):
            rights &= FILE_RIGHTS
        attr = _PathBeneathAttr(rights, fd)
        _syscall(
            SYS_ADD_RULE,
            ctypes.c_int(ruleset_fd),
            ctypes.c_int(RULE_PATH_BENEATH),
            ctypes.byref(attr),
            ctypes.c_uint32(0),
        )
    finally:
        os.close(fd)
