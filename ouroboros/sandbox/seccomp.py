"""A seccomp filter refusing unix sockets, where no mount namespace can hide them.

The filter answers `socket(AF_UNIX, ...)` with EACCES (so no pathname or abstract unix
socket can be connected to or bound), refuses `io_uring_setup` (whose requests would bypass
the filter) and every system call of another ABI (x32, 32-bit), and allows the rest.
`socketpair` stays allowed: its two ends reach only each other. It is installed by the
thread that starts a command, after no-new-privileges, and the command inherits it.

    if seccomp.supported(): seccomp.refuse_unix_sockets(libc)
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
AF_UNIX = 1
X32_SYSCALL_BIT = 0x40000000
# Per machine: the audit arch, and the numbers of socket and io_uring_setup.
ARCHES = {"x86_64": (0xC000003E, 41, 425), "aarch64": (0xC00000B7, 198, 425)}

# Classic BPF, as the kernel's struct sock_filter: code, jt, jf, k.
LD_W_ABS, JEQ_K, JGE_K, RET_K = 0x20, 0x15, 0x35, 0x06
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
NR, ARCH, ARG0 = 0, 4, 16  # offsets in struct seccomp_data (arg0's low half, little-endian)


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def supported(machine: str | None = None) -> bool:
    return (machine or platform.machine()) in ARCHES


def unix_socket_filter(machine: str) -> bytes:
    """The filter's instructions for `machine` (pure)."""
    arch, socket_nr, uring_nr = ARCHES[machine]
    refuse = RET_ERRNO | errno.EACCES
    program = [
        (LD_W_ABS, 0, 0, ARCH),
        (JEQ_K, 1, 0, arch),
        (RET_K, 0, 0, RET_ERRNO | errno.ENOSYS),  # another ABI
        (LD_W_ABS, 0, 0, NR),
        (JGE_K, 0, 1, X32_SYSCALL_BIT),
        (RET_K, 0, 0, RET_ERRNO | errno.ENOSYS),
        (JEQ_K, 0, 1, uring_nr),
        (RET_K, 0, 0, RET_ERRNO | errno.ENOSYS),
        (JEQ_K, 0, 3, socket_nr),
        (LD_W_ABS, 0, 0, ARG0),
        (JEQ_K, 0, 1, AF_UNIX),
        (RET_K, 0, 0, refuse),
        (RET_K, 0, 0, RET_ALLOW),
    ]
    return b"".join(struct.pack("=HBBI", *line) for line in program)


def refuse_unix_sockets(libc: ctypes.CDLL) -> None:
    """Install the filter on the calling thread (no-new-privileges must be set). OSError."""
    code = unix_socket_filter(platform.machine())
    buffer = ctypes.create_string_buffer(code, len(code))
    program = _Program(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"seccomp filter: {os.strerror(error)}")
