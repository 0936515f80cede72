"""The network cut of a harness that is not root: namespaces made once per run by a helper
process, entered per command by a small exec helper.

A thread of a process that has several can neither make a user namespace nor enter one, and
running Python in a child forked from a threaded process (`preexec_fn`) may deadlock on a
lock another thread held at the fork. So:

1. once per run, `python -m ouroboros.sandbox.userns PLAN` (single-threaded, unconfined)
   makes a user namespace mapping the user to itself, a network namespace with only loopback
   (up), and, when PLAN names directories to hide, a mount namespace hiding the unix sockets
   (mounts.hide); the harness opens the namespaces by file descriptor and the helper exits
   (the descriptors keep them for the run);
2. per command, the confining thread (a Confiner: Landlock, no-new-privileges) starts
   `nsenter` (util-linux; ~2 ms more per command), which enters them through the inherited
   descriptors and execs the command. A working directory opened before entering the mount
   namespace would lie outside it, so a `/bin/sh -c` command gets a `cd` in front and
   anything else goes through `env -C`. Where nsenter is missing, a few lines of Python do
   the same, at the cost of starting an interpreter per command (~50 ms).

    namespaces = Namespaces.make(mounts.plan(...))
    launcher = Entering(confiner, namespaces)
    process = launcher.spawn(["/bin/sh", "-c", "make"], cwd=ws, ...)
"""

from __future__ import annotations

import ctypes
import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ouroboros.sandbox import mounts
from ouroboros.sandbox.isolation import CLONE_NEWNET, CLONE_NEWUSER, Confiner, loopback_up

SYSTEM_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"
# Each namespace: its name under /proc/<pid>/ns, and nsenter's long option for it.
KINDS = (("user", "user"), ("net", "net"), ("mnt", "mount"))
KEEP_IDS = "preserve-credentials"  # nsenter's option: no setuid(0) inside
READY = "ready"
HELPER_SECS = 10  # how long the helper may take to answer, or to exit once answered

# The exec helper where nsenter is missing: argv is the descriptors (user, net[, mnt]), the
# working directory or "", then the command.
ENTER = """import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
count = int(sys.argv[1])
for fd, flag in zip(sys.argv[2:2 + count], (0x10000000, 0x40000000, 0x00020000)):
    if libc.setns(int(fd), flag) != 0:
        sys.exit("setns: " + os.strerror(ctypes.get_errno()))
    os.close(int(fd))
if sys.argv[2 + count]:
    os.chdir(sys.argv[2 + count])
os.execv(sys.argv[3 + count], sys.argv[3 + count:])
"""


@dataclass
class Namespaces:
    """Descriptors of a user, a network and (when sockets are hidden) a mount namespace."""

    fds: tuple[int, ...]
    hidden: bool

    @classmethod
    def make(cls, steps: list[tuple[Path, list[Path]]]) -> Namespaces:
        """Made by the helper process; raises OSError naming why they could not be."""
        plan = json.dumps([[str(d), [str(p) for p in inside]] for d, inside in steps])
        helper = subprocess.Popen(
            [sys.executable, "-m", "ouroboros.sandbox.userns", plan],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd="/",
            text=True,
        )
        assert helper.stdin is not None and helper.stdout is not None
        try:
            if helper.stdout.readline().strip() != READY:
                said = helper.communicate(timeout=HELPER_SECS)[1]
                raise OSError(
                    f"namespaces could not be made: {(said.strip().splitlines() or ['?'])[-1]}"
                )
            fds = namespace_fds(helper.pid, KINDS if steps else KINDS[:2])
        except subprocess.TimeoutExpired:
            raise OSError("namespaces could not be made: their helper did not exit") from None
        finally:
            _end(helper)
        return cls(fds, bool(steps))

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = ()


def _end(helper: subprocess.Popen[str]) -> None:
    """Let the helper go (its namespaces stay alive through the descriptors taken), killing
    it if it does not exit in time."""
    if helper.returncode is not None:
        return
    assert helper.stdin is not None
    helper.stdin.close()
    try:
        helper.wait(timeout=HELPER_SECS)
    except subprocess.TimeoutExpired:
        helper.kill()
        helper.wait()


def namespace_fds(pid: int, kinds: tuple[tuple[str, str], ...]) -> tuple[int, ...]:
    """Descriptors of the namespaces `kinds` of process `pid`; where one cannot be opened,
    those opened already are closed (they would keep their namespaces alive) and OSError."""
    fds: list[int] = []
    try:
        for name, _ in kinds:
            fds.append(os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC))
    except OSError:
        for fd in fds:
            os.close(fd)
        raise
    return tuple(fds)


def entering_command(
    fds: tuple[int, ...], cwd: str | None, args: list[str], nsenter: str | None, env: str | None
) -> list[str]:
    """The command line that enters `fds` (user, net[, mnt]) and runs `args` in `cwd` (pure)."""
    if nsenter is not None and env is not None:
        names = [f"--{option}=/proc/self/fd/{fd}" for (_, option), fd in zip(KINDS, fds)]
        return [nsenter, *names, f"--{KEEP_IDS}", "--", *in_directory(cwd, args, env)]
    return [
        sys.executable,
        "-I",
        "-S",
        "-c",
        ENTER,
        str(len(fds)),
        *map(str, fds),
        cwd or "",
        *args,
    ]


def in_directory(cwd: str | None, args: list[str], env: str) -> list[str]:
    """`args` run in `cwd`: a `/bin/sh -c` command begins with a `cd` (the cheapest: no
    program more to start), anything else goes through `env -C` (pure)."""
    if not cwd:
        return args
    if len(args) == 3 and args[:2] == ["/bin/sh", "-c"]:
        return [*args[:2], f"cd -- {shlex.quote(cwd)} || exit 125\n{args[2]}"]
    return [env, "-C", cwd, *args]


@dataclass
class Entering:
    """Starts each command confined by `confiner` inside `namespaces`, through an exec
    helper: the launcher of a non-root harness that cuts the network."""

    confiner: Confiner
    namespaces: Namespaces
    nsenter: str | None = field(default_factory=lambda: shutil.which("nsenter", path=SYSTEM_PATH))
    env: str | None = field(default_factory=lambda: shutil.which("env", path=SYSTEM_PATH))

    @property
    def sockets(self) -> str:
        return "namespace" if self.namespaces.hidden else self.confiner.sockets

    @property
    def helper(self) -> str:
        return "nsenter" if self.nsenter and self.env else "python"

    def spawn(self, args: list[str], **popen: Any) -> subprocess.Popen[bytes]:
        cwd = popen.get("cwd")
        line = entering_command(
            self.namespaces.fds,
            str(Path(cwd).absolute()) if cwd else None,
            args,
            self.nsenter,
            self.env,
        )
        passed = tuple(popen.pop("pass_fds", ())) + self.namespaces.fds
        return self.confiner.spawn(line, pass_fds=passed, **popen)

    def close(self) -> None:
        self.namespaces.close()
        self.confiner.close()


def _write(path: str, content: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, content)
    finally:
        os.close(fd)


def make_here(steps: list[tuple[Path, list[Path]]]) -> None:
    """The helper's work, in its own single-threaded process: the namespaces, mapped to the
    user, loopback up, the sockets hidden."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWUSER | CLONE_NEWNET | (mounts.CLONE_NEWNS if steps else 0)
    if libc.unshare(flags) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"unshare: {os.strerror(error)}")
    _write("/proc/self/setgroups", b"deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1".encode())
    _write("/proc/self/gid_map", f"{gid} {gid} 1".encode())
    loopback_up(libc)
    if steps:
        mounts.hide(libc, steps)


def main(plan: str) -> None:
    steps = [(Path(d), [Path(p) for p in inside]) for d, inside in json.loads(plan)]
    make_here(steps)
    print(READY, flush=True)
    sys.stdin.read()  # until the harness has opened the namespaces


if __name__ == "__main__":
    main(sys.argv[1])
