"""Unix sockets outside the workspace are out of a confined command's reach (a desktop's
D-Bus, ssh-agent, tmux, docker.sock would be a full escape), as root and as an unprivileged
user, with the network allowed or cut; and an unreadable directory on PATH is skipped and
named, never a reason to drop the sandbox."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ouroboros.sandbox import landlock, seccomp
from ouroboros.sandbox.policy import Sandbox
from ouroboros.tools import ShellExec
from tests.security.accounts import as_probe_user, probe_user, probe_workspace, shared_dir

needs_landlock = pytest.mark.skipif(landlock.abi() == 0, reason="this kernel has no Landlock")

PROBE = """
import socket, sys
for path in sys.argv[1:]:
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        print("reached", path)
    except OSError as error:
        print("refused", path, error.errno)
"""


def listening(path: Path) -> socket.socket:
    path.unlink(missing_ok=True)
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    server.setblocking(False)
    path.chmod(0o777)  # the harness's user may connect, by file permissions
    return server


def accepted(server: socket.socket) -> bool:
    try:
        server.accept()[0].close()
    except BlockingIOError:
        return False
    return True


@pytest.fixture
def outside(tmp_path: Path) -> Iterator[list[tuple[Path, socket.socket]]]:
    """Listening sockets outside the workspace: in /run, in a temp dir (under /tmp), and
    where services keep theirs (/srv, /var/lib, /dev/shm)."""
    shared = shared_dir()
    tag = f"ouroboros-test-{os.getpid()}.sock"
    paths = [
        Path(f"/run/{tag}"),
        shared / "agent.sock",
        *(Path(place) / tag for place in ("/srv", "/var/lib", "/dev/shm") if Path(place).is_dir()),
    ]
    servers = []
    try:
        for path in paths:
            try:
                servers.append((path, listening(path)))
            except OSError as error:
                pytest.skip(f"cannot listen at {path}: {error}")
        yield servers
    finally:
        for path, server in servers:
            server.close()
            path.unlink(missing_ok=True)
        subprocess.run(["rm", "-rf", str(shared)])


def shell(sandbox: Sandbox, workspace: Path, command: str) -> str:
    tool = ShellExec(
        workspace,
        timeout_secs=20,
        max_output_bytes=10_000,
        blocked_patterns=[],
        secret_env_names=[],
        on_security=lambda e: None,
        sandbox=sandbox,
    )
    return asyncio.run(tool.run({"command": command})).content


@needs_landlock
@pytest.mark.parametrize("network", [True, False])
def test_a_root_harness_commands_reach_no_unix_socket_outside_the_workspace(
    tmp_path: Path, outside, network: bool
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "probe.py").write_text(PROBE)
    inside = listening(workspace / "own.sock")
    beside = listening(tmp_path / "beside.sock")  # reached from the workspace as ../beside.sock
    sandbox = Sandbox.prepare("auto", workspace=workspace, network=network)
    try:
        paths = " ".join(str(p) for p, _ in outside)
        seen = shell(
            sandbox, workspace, f"{sys.executable} probe.py {paths} ../beside.sock own.sock"
        )
    finally:
        sandbox.close()
        inside.close()
        beside.close()
    assert "reached /" not in seen and "reached .." not in seen, seen
    assert not any(accepted(server) for _, server in outside)
    assert sandbox.sockets in ("namespace", "seccomp")
    if sandbox.sockets == "namespace":  # what the workspace holds is the agent's own
        assert "reached own.sock" in seen
        assert "unix sockets outside the workspace hidden" in sandbox.summary
    else:
        assert "unix sockets refused (seccomp" in sandbox.summary


AS_USER = """
import json, subprocess, sys
from pathlib import Path
from ouroboros.sandbox.policy import Sandbox
workspace = Path(sys.argv[1])
out = {}
for network in (True, False):
    sandbox = Sandbox.prepare("auto", workspace=workspace, network=network)
    command = "/usr/bin/python3 probe.py " + " ".join(sys.argv[2:])
    process = sandbox.spawn(["/bin/sh", "-c", command], cwd=workspace,
                            env=sandbox.environment({"PATH": "/usr/bin:/bin"}),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out[str(network)] = [sandbox.mechanism, sandbox.sockets, sandbox.summary,
                         process.communicate(timeout=30)[0].decode()]
    sandbox.close()
print(json.dumps(out))
"""


@needs_landlock
def test_an_unprivileged_harness_commands_reach_no_unix_socket_outside_the_workspace(
    outside,
) -> None:
    shared, workspace = probe_workspace(PROBE)
    neighbour = listening(shared / "neighbour.sock")  # beside the workspace, under /tmp
    try:
        probe = as_probe_user(
            AS_USER,
            str(workspace),
            *(str(p) for p, _ in outside),
            "../neighbour.sock",
            stdout=subprocess.PIPE,
            cwd=str(shared),
        )
        out, _ = probe.communicate(timeout=120)
    finally:
        neighbour.close()
        subprocess.run(["rm", "-rf", str(shared)])
    results = json.loads(out)
    for network, (mechanism, sockets, summary, seen) in results.items():
        assert mechanism == "landlock", (network, summary)
        assert sockets in ("namespace", "seccomp"), (network, summary)
        assert "reached" not in seen, (network, seen)
    assert not any(accepted(server) for _, server in outside)


UNREADABLE_PATH = """
import json, sys
from pathlib import Path
from ouroboros.sandbox.policy import Sandbox
sandbox = Sandbox.prepare("auto", workspace=Path(sys.argv[1]))
print(json.dumps([sandbox.mechanism, [str(p) for p in sandbox.skipped], sandbox.summary]))
sandbox.close()
"""


@needs_landlock
def test_an_unreadable_directory_on_path_is_skipped_and_named_not_the_sandbox(
    tmp_path: Path,
) -> None:
    probe_user()
    hidden = tmp_path / "bin"  # pytest's tmp dir is root's alone
    hidden.mkdir()
    shared = shared_dir()
    try:
        probe = as_probe_user(
            UNREADABLE_PATH,
            str(shared),
            stdout=subprocess.PIPE,
            cwd=str(shared),
            env={"PATH": f"{hidden}:/usr/local/bin:/usr/bin:/bin"},
        )
        out, _ = probe.communicate(timeout=60)
    finally:
        subprocess.run(["rm", "-rf", str(shared)])
    mechanism, skipped, summary = json.loads(out)
    assert mechanism == "landlock", summary
    assert skipped == [str(hidden)]
    assert f"skipped unreadable: {hidden}" in summary


USER_ATTACKS = [
    ("read the config", "cat ../ouroboros.toml"),
    ("the key from the parent", "tr '\\0' '\\n' < /proc/$PPID/environ | grep TEST_API_KEY"),
    ("a unix socket outside", "/usr/bin/python3 probe.py {socket}"),
    ("work as before", "echo hello > made.txt && cat made.txt"),
]


@needs_landlock
def test_an_unprivileged_harness_with_roots_path_keeps_its_sandbox_against_each_attack(
    outside, scripted_server
) -> None:
    from ouroboros.testing import Reply
    from tests.helpers import make_project
    from tests.security.accounts import harness_as_probe_user

    socket_path = outside[0][0]
    replies = [
        Reply(name, [("shell_exec", {"command": command.format(socket=socket_path)})])
        for name, command in USER_ATTACKS
    ]
    server = scripted_server([*replies, Reply("done")])
    project = shared_dir() / "project"
    try:
        config = make_project(project, server.base_url, model={"api_key_env": "TEST_API_KEY"})
        (project / "workspace" / "probe.py").write_text(PROBE)
        path = os.environ.get("PATH", "") + ":/root/bin"  # root's PATH: some of it unreadable
        result = harness_as_probe_user(
            project,
            "run",
            "--config",
            str(config),
            "--headless",
            "--max-turns",
            str(len(USER_ATTACKS) + 1),
            env={"PATH": path, "TEST_API_KEY": "sk-test-0123456789"},
        )
    finally:
        subprocess.run(["rm", "-rf", str(project.parent)])
    assert result.returncode == 3, result.stderr  # paused at its max_turns
    start = next(line for line in result.stdout.splitlines() if "sandbox:" in line)
    assert "landlock (ABI" in start and "skipped unreadable: " in start, start
    results = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    seen = {name: text for (name, _), text in zip(USER_ATTACKS, results)}
    assert "[model]" not in seen["read the config"]
    assert "sk-test" not in seen["the key from the parent"]
    assert "reached" not in seen["a unix socket outside"], seen["a unix socket outside"]
    assert seen["work as before"].startswith("hello")
    assert not accepted(outside[0][1])


def test_a_home_inside_a_hidden_directory_is_hidden_with_it() -> None:
    from ouroboros.sandbox.mounts import plan

    steps = plan(
        [Path("/run"), Path("/tmp"), Path("/tmp/ci/home")],
        keep=[Path("/tmp/ci/home/ws"), Path("/usr")],
    )
    assert steps == [(Path("/run"), []), (Path("/tmp"), [Path("/tmp/ci/home/ws")])]


BYPASSES = """
import ctypes, errno, json, os, socket
from ouroboros.sandbox import seccomp
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
seccomp.refuse_unix_sockets(libc)
def errno_of(*call):
    return 0 if libc.syscall(*call) >= 0 else ctypes.get_errno()
_, socket_nr, uring_nr = seccomp.ARCHES[os.uname().machine]
params = ctypes.create_string_buffer(120)
try:
    socket.socket(socket.AF_UNIX)
    unix = 0
except OSError as error:
    unix = error.errno
print(json.dumps({
    "unix": unix,
    "io_uring_setup": errno_of(uring_nr, 1, params),
    "x32 socket": errno_of(  # ENOSYS from a kernel without x32 too: a weaker check there
        seccomp.X32_SYSCALL_BIT | socket_nr, socket.AF_UNIX, socket.SOCK_STREAM, 0),
    "socketpair": len(socket.socketpair()),
    "inet": socket.socket(socket.AF_INET).fileno() > 0,
}))
"""


@pytest.mark.skipif(not seccomp.supported(), reason="no seccomp filter for this machine")
def test_the_seccomp_filter_refuses_unix_sockets_and_its_bypasses() -> None:
    child = subprocess.run(
        [sys.executable, "-c", BYPASSES], capture_output=True, text=True, timeout=60
    )
    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout) == {
        "unix": errno.EACCES,
        "io_uring_setup": errno.ENOSYS,
        "x32 socket": errno.ENOSYS,
        "socketpair": 2,
        "inet": True,
    }
