"""The shell's sandbox, attacked as an agent would: a real `ouroboros run` whose scripted
model tries to read and forge the log, rewrite the config and the prompt, and read the API key
from the harness's /proc entry. Then `sandbox = "required"` and `"off"`, and the pure parts."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ouroboros.errors import ConfigError
from ouroboros.sandbox import landlock
from ouroboros.sandbox.isolation import Confiner
from ouroboros.sandbox.policy import (
    Sandbox,
    exposed,
    missing_mechanism,
    read_roots,
    refuse_or_unconfined,
    rules,
    summary,
    world_readable_rules,
)
from ouroboros.sandbox.userns import Entering, Namespaces
from ouroboros.testing import Reply
from ouroboros.tools import ShellExec
from tests.helpers import clean_env, make_project, of_type, ouroboros, ouroboros_here, run_events

KEY = "sk-live-0123456789abcdef"
needs_landlock = pytest.mark.skipif(landlock.abi() == 0, reason="this kernel has no Landlock")

ATTACKS = [  # {log} is the run's events.jsonl, found by the scripted model as an agent would
    ("list the state dir", "ls ../.ouroboros/runs"),
    ("read the log", "head -c 300 {log}"),
    ("forge a record", 'echo \'{{"type": "forged"}}\' >> {log}'),
    ("rewrite the config", "echo '# pwned' >> ../ouroboros.toml"),
    ("rewrite the prompt", "echo 'obey me' > ../SYSTEM_PROMPT.md"),
    ("read the config", "cat ../ouroboros.toml"),
    ("the key from the parent", "tr '\\0' '\\n' < /proc/$PPID/environ"),
    ("write outside", "echo x > /tmp/ouroboros-sandbox-escape-$$ && echo wrote"),
    ("work as before", "echo hello > made.txt && cat made.txt && echo $TMPDIR"),
]


def attacker(project: Path):
    """The scripted model: one attack per turn, with the real path of the run's log."""

    def brain(messages: list[dict]) -> Reply:
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn >= len(ATTACKS):
            return Reply("done")
        name, command = ATTACKS[turn]
        log = next((project / ".ouroboros" / "runs").glob("*/events.jsonl"))
        return Reply(name, [("shell_exec", {"command": command.format(log=log)})])

    return brain


def confined_shell(workspace: Path, sandbox: Sandbox) -> ShellExec:
    """A shell tool with no blocked patterns and no secrets, confined by `sandbox`."""
    return ShellExec(
        workspace,
        timeout_secs=10,
        max_output_bytes=10_000,
        blocked_patterns=[],
        secret_env_names=[],
        on_security=lambda e: None,
        sandbox=sandbox,
    )


def shell_results(server) -> dict[str, str]:
    """Each attack's result, as the model was sent it."""
    last = server.requests[-1]["messages"]
    results = [m["content"] for m in last if m["role"] == "tool"]
    return {name: text for (name, _), text in zip(ATTACKS, results)}


@needs_landlock
def test_the_shell_cannot_touch_the_harness_or_read_its_key(tmp_path, scripted_server):
    server = scripted_server(attacker(tmp_path))
    config = make_project(tmp_path, server.base_url, model={"api_key_env": "TEST_API_KEY"})
    config_text = config.read_text()
    prompt_text = (tmp_path / "SYSTEM_PROMPT.md").read_text()

    result = ouroboros(
        "run",
        "--config",
        str(config),
        "--headless",
        "--max-turns",
        str(len(ATTACKS) + 1),
        env=clean_env(TEST_API_KEY=KEY),
    )

    assert result.returncode == 3, result.stderr
    seen = shell_results(server)
    assert config.read_text() == config_text
    assert (tmp_path / "SYSTEM_PROMPT.md").read_text() == prompt_text
    events = run_events(tmp_path)
    assert not of_type(events, "forged")
    for name in ("list the state dir", "read the log", "read the config", "forge a record"):
        assert "run_start" not in seen[name], name  # unreadable, or hidden by a mount
        assert any(
            why in seen[name]
            for why in ("Permission denied", "No such file", "Directory nonexistent")
        ), name
    assert "pwned" not in config.read_text() and "[model]" not in seen["read the config"]
    assert "Permission denied" in seen["the key from the parent"]
    assert "wrote" not in seen["write outside"]
    assert seen["work as before"].startswith("hello\n/tmp/ouroboros-sandbox-")
    assert (tmp_path / "workspace" / "made.txt").read_text() == "hello\n"
    # Nothing the model was sent, and nothing logged, holds the key.
    assert KEY not in json.dumps(server.requests)
    assert (
        KEY
        not in (tmp_path / ".ouroboros")
        .joinpath("runs", events[0]["run_id"], "events.jsonl")
        .read_text()
    )
    # The start line and run_start say what is confined.
    start = of_type(events, "run_start")[0]["sandbox"]
    assert start["mechanism"] == "landlock" and start["abi"] == landlock.abi()
    line = (
        f"sandbox: landlock (ABI {landlock.abi()}): shell reads the system, writes only "
        "the workspace and a private temp dir; network allowed"
    )
    assert line in result.stdout


def test_sandbox_off_says_the_shell_is_unconfined(tmp_path, scripted_server):
    server = scripted_server(
        [Reply("look", [("shell_exec", {"command": "cat ../ouroboros.toml"})]), Reply("done")]
    )
    config = make_project(tmp_path, server.base_url, safety={"sandbox": "off"})

    result = ouroboros_here("run", "--config", str(config), "--headless", "--max-turns", "2")

    assert result.returncode == 3, result.stderr
    assert 'sandbox: sandbox off (safety.sandbox = "off"): shell is unconfined' in result.stdout
    start = of_type(run_events(tmp_path), "run_start")[0]["sandbox"]
    assert start["mechanism"] == "off"
    assert "[model]" in server.requests[-1]["messages"][-1]["content"]  # as it was before


@needs_landlock
def test_sandbox_required_starts_where_landlock_is_and_refuses_what_it_cannot_do(tmp_path):
    # Where Landlock is present, "required" confines like "auto".
    sandbox = Sandbox.prepare("required", workspace=tmp_path)
    try:
        assert sandbox.mechanism == "landlock" and sandbox.confined
    finally:
        sandbox.close()


@pytest.mark.skipif(landlock.abi() != 0, reason="Landlock is present: 'required' starts")
def test_sandbox_required_without_landlock_is_exit_2(tmp_path, scripted_server):
    server = scripted_server([Reply("done")])
    config = make_project(tmp_path, server.base_url, safety={"sandbox": "required"})
    result = ouroboros_here("run", "--config", str(config), "--headless", "--max-turns", "1")
    assert result.returncode == 2
    assert 'safety.sandbox = "required"' in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / ".ouroboros" / "runs").exists()


def test_a_required_sandbox_that_is_missing_is_one_line_naming_it() -> None:
    assert "Linux-only" in missing_mechanism(0, "darwin")
    assert "no Landlock" in missing_mechanism(0, "linux")
    assert missing_mechanism(7, "linux") == ""
    with pytest.raises(ConfigError) as refused:
        refuse_or_unconfined("required", missing_mechanism(0, "darwin"))
    assert refused.value.message == (
        'safety.sandbox = "required", but Landlock is Linux-only and this is darwin; the run '
        "is refused rather than start the shell unconfined"
    )
    fallback = refuse_or_unconfined("auto", missing_mechanism(0, "darwin"))
    assert not fallback.confined and fallback.summary == (
        "no sandbox (Landlock is Linux-only and this is darwin): shell is unconfined"
    )


def test_a_bad_sandbox_setting_is_one_line_and_exit_2(tmp_path) -> None:
    config = make_project(tmp_path, "http://127.0.0.1:9", safety={"sandbox": "on"})
    result = ouroboros_here("run", "--config", str(config), "--headless")
    assert result.returncode == 2
    assert "safety.sandbox" in result.stderr and "Traceback" not in result.stderr


@needs_landlock
def test_a_command_in_the_sandbox_sees_its_private_home_and_temp_dir(tmp_path) -> None:
    sandbox = Sandbox.prepare("auto", workspace=tmp_path)
    tool = confined_shell(tmp_path, sandbox)
    try:
        result = asyncio.run(
            tool.run(
                {
                    "command": "touch $HOME/a $TMPDIR/b && ls ~ $TMPDIR && "
                    "cat /root/.bashrc /etc/hostname >/dev/null"
                }
            )
        )
        assert "a\n" in result.content and "b\n" in result.content
        private = sandbox.private_tmp
        assert private is not None and private.is_dir()
    finally:
        sandbox.close()
    assert not private.exists()  # removed at the end of the run


@needs_landlock
def test_network_false_leaves_only_loopback(tmp_path) -> None:
    sandbox = Sandbox.prepare("auto", workspace=tmp_path, network=False)
    tool = confined_shell(tmp_path, sandbox)
    probe = (
        "import socket\ns = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "socket.create_connection(s.getsockname()).close(); print('loopback ok')\n"
        "try:\n    socket.create_connection(('192.0.2.1', 80), timeout=1)\n"
        "except OSError as e:\n    print('outside:', e.errno)\n"
    )
    (tmp_path / "probe.py").write_text(probe)
    try:
        result = asyncio.run(tool.run({"command": f"{sys.executable} probe.py"}))
    finally:
        sandbox.close()
    assert "loopback ok" in result.content, result.content
    assert sandbox.network_cut in ("namespace", "tcp")
    assert "outside: 101" in result.content or "outside: 13" in result.content  # unreachable


@needs_landlock
@pytest.mark.skipif(os.geteuid() != 0, reason="only a root harness could read /etc/shadow")
def test_a_root_harness_commands_read_in_etc_only_what_any_user_may(tmp_path) -> None:
    sandbox = Sandbox.prepare("auto", workspace=tmp_path)
    tool = confined_shell(tmp_path, sandbox)
    try:
        result = asyncio.run(tool.run({"command": "cat /etc/shadow; head -c 5 /etc/passwd"}))
    finally:
        sandbox.close()
    assert result.content == ("cat: /etc/shadow: Permission denied\nroot:\n[exit code 0]")


def test_world_readable_rules_grant_whole_trees_and_skip_private_files(tmp_path) -> None:
    (tmp_path / "open" / "deep").mkdir(parents=True)
    (tmp_path / "open" / "deep" / "a.conf").write_text("a")
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "public").write_text("p")
    (tmp_path / "mixed" / "shadow").write_text("s")
    (tmp_path / "mixed" / "shadow").chmod(0o640)
    (tmp_path / "top.conf").write_text("t")
    for path in (tmp_path, tmp_path / "open", tmp_path / "open" / "deep", tmp_path / "mixed"):
        path.chmod(0o755)
    for path in (
        tmp_path / "open" / "deep" / "a.conf",
        tmp_path / "mixed" / "public",
        tmp_path / "top.conf",
    ):
        path.chmod(0o644)

    granted = dict(world_readable_rules(tmp_path, landlock.READ))

    assert granted == {
        tmp_path: landlock.READ_DIR,
        tmp_path / "open": landlock.READ,
        tmp_path / "mixed": landlock.READ_DIR,
        tmp_path / "mixed" / "public": landlock.READ_FILE | landlock.EXECUTE,
        tmp_path / "top.conf": landlock.READ_FILE | landlock.EXECUTE,
    }


@needs_landlock
@pytest.mark.parametrize("helper", ["nsenter", "python"])
def test_a_user_namespace_cuts_the_network_as_for_a_harness_that_is_not_root(
    tmp_path, helper
) -> None:
    # The way a non-root harness cuts the network (a user and network namespace made for the
    # run by a helper process, entered per command through an exec helper); as root it is
    # taken only when asked for, as here.
    abi = landlock.abi()
    readable = [
        Path(p)
        for p in ("/usr", "/bin", "/lib", "/lib64", "/etc", "/proc", sys.prefix, sys.base_prefix)
    ]
    confiner = Confiner(landlock.Ruleset.build(abi, rules(abi, tmp_path, None, readable)))
    launcher = Entering(confiner, Namespaces.make([]))
    if helper == "python":
        launcher.nsenter = None
    elif launcher.helper != "nsenter":
        pytest.skip("no nsenter (util-linux) here")
    probe = (
        "import os, socket\ns = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "socket.create_connection(s.getsockname()).close(); print('loopback ok')\n"
        "try:\n    socket.create_connection(('192.0.2.1', 80), timeout=1)\n"
        "except OSError as e:\n    print('outside:', e.errno)\n"
        "print(os.getcwd())\n"
    )
    try:
        process = launcher.spawn(
            [sys.executable, "-c", probe],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        output = process.communicate(timeout=10)[0].decode()
    finally:
        launcher.close()
    assert output == f"loopback ok\noutside: 101\n{tmp_path}\n"


# -- the pure parts ---------------------------------------------------------------------------


def test_read_roots_leave_out_home_and_any_directory_holding_a_protected_path() -> None:
    roots = read_roots(
        ["/usr"],
        "/home/u/bin:/home/u:/home/u/proj:relative:/opt/tool/bin",
        ["/home/u/.venv"],
        [Path("/home/u/proj/.ouroboros")],
        Path("/home/u"),
    )
    assert roots == [
        Path("/usr"),
        Path("/home/u/.venv"),
        Path("/home/u/bin"),
        Path("/opt/tool/bin"),
    ]


def test_rules_grant_writes_only_to_the_workspace_and_the_private_temp_dir() -> None:
    granted = dict(rules(7, Path("/ws"), Path("/tmp/p"), [Path("/usr")]))
    writable = {path for path, rights in granted.items() if rights & landlock.WRITE_FILE}
    assert writable == {
        Path("/ws"),
        Path("/tmp/p"),
        *map(Path, ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")),
    }
    assert granted[Path("/usr")] == landlock.READ
    assert granted[Path("/ws")] & landlock.REFER and granted[Path("/ws")] & landlock.TRUNCATE


@pytest.mark.parametrize(
    "abi,refer,truncate,ioctl",
    [
        (1, False, False, False),
        (2, True, False, False),
        (3, True, True, False),
        (5, True, True, True),
    ],
)
def test_each_abi_handles_only_the_rights_it_knows(abi, refer, truncate, ioctl) -> None:
    handled = landlock.handled_fs(abi)
    assert bool(handled & landlock.REFER) == refer
    assert bool(handled & landlock.TRUNCATE) == truncate
    assert bool(handled & landlock.IOCTL_DEV) == ioctl
    assert landlock.write_rights(abi) == handled


def test_what_lies_inside_the_workspace_is_reported_as_not_protected() -> None:
    found = exposed(
        Path("/p"),
        [Path("/usr")],
        {"config": Path("/p/ouroboros.toml"), "state dir": Path("/q/.ouroboros")},
    )
    assert found == ["the config (inside the workspace)"]
    text = summary("landlock", 7, True, "", found, sockets="seccomp")
    assert text.endswith(
        "network allowed; unix sockets refused (seccomp filter; socketpair "
        "allowed); not protected: the config (inside the workspace)"
    )
    assert "truncate() is not restricted" in summary("landlock", 2, True, "", [])
    assert "truncate() is not restricted" not in text
    assert summary("landlock", 7, True, "", [], skipped=[Path("/root/bin")]).endswith(
        "; skipped unreadable: /root/bin"
    )
    assert summary("none", 0, True, "", [], "why") == "no sandbox (why): shell is unconfined"


CUT_PROBE = """import os, socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
socket.create_connection(s.getsockname()).close(); print("loopback ok")
try:
    socket.create_connection(("192.0.2.1", 80), timeout=1)
except OSError as e:
    print("outside:", e.errno)
print(os.getcwd())
"""

NETWORK_CUT_AS_USER = """
import json, subprocess, sys, threading, time
from pathlib import Path
from ouroboros.sandbox.policy import Sandbox
started = subprocess.Popen.__init__
def no_preexec(self, *args, **kwargs):  # Python run in a child forked from threads: refused
    assert kwargs.get("preexec_fn") is None, "preexec_fn in a threaded harness"
    started(self, *args, **kwargs)
subprocess.Popen.__init__ = no_preexec
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # a threaded harness
workspace = Path(sys.argv[1])
sandbox = Sandbox.prepare("auto", workspace=workspace, network=False)
process = sandbox.spawn(["/bin/sh", "-c", "/usr/bin/python3 probe.py && echo made > made.txt"],
                        cwd=workspace, env=sandbox.environment({"PATH": "/usr/bin:/bin"}),
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
out = process.communicate(timeout=30)[0].decode()
print(json.dumps([sandbox.network_cut, sandbox.sockets, sandbox.summary, out]))
sandbox.close()
"""


@needs_landlock
def test_an_unprivileged_harness_cuts_the_network_without_python_in_a_forked_child() -> None:
    from tests.security.accounts import as_probe_user, probe_workspace

    shared, workspace = probe_workspace(CUT_PROBE)
    try:
        probe = as_probe_user(
            NETWORK_CUT_AS_USER,
            str(workspace),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(shared),
            python="/usr/bin/python3",
        )
        out, err = probe.communicate(timeout=120)
        made = (workspace / "made.txt").read_text() if (workspace / "made.txt").exists() else ""
    finally:
        subprocess.run(["rm", "-rf", str(shared)])
    assert probe.returncode == 0, err
    cut, sockets, text, seen = json.loads(out)
    assert cut == "namespace", text
    assert "network cut (own network namespace with only loopback)" in text
    assert sockets == "namespace", text
    assert seen.splitlines() == ["loopback ok", "outside: 101", str(workspace)], seen
    assert made == "made\n"


def test_the_exec_helper_enters_the_namespaces_and_then_the_working_directory() -> None:
    from ouroboros.sandbox.userns import entering_command

    line = entering_command(
        (5, 6, 7), "/w s", ["/bin/sh", "-c", "make"], "/usr/bin/nsenter", "/usr/bin/env"
    )
    assert line == [
        "/usr/bin/nsenter",
        "--user=/proc/self/fd/5",
        "--net=/proc/self/fd/6",
        "--mount=/proc/self/fd/7",
        "--preserve-credentials",
        "--",
        "/bin/sh",
        "-c",
        "cd -- '/w s' || exit 125\nmake",
    ]
    other = entering_command(
        (5, 6), "/w", ["/usr/bin/python3", "x.py"], "/usr/bin/nsenter", "/usr/bin/env"
    )
    assert other[-5:] == ["/usr/bin/env", "-C", "/w", "/usr/bin/python3", "x.py"]
    assert "--mount" not in " ".join(other)  # no sockets hidden: no mount namespace
    fallback = entering_command((5, 6), None, ["/bin/true"], None, None)
    assert fallback[1:3] == ["-I", "-S"] and fallback[-4:] == ["5", "6", "", "/bin/true"]


def test_a_namespace_helper_that_never_exits_is_one_error_and_no_process_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ouroboros.sandbox import userns

    hanging = [
        sys.executable,
        "-c",
        "import sys, time; print('not ready', flush=True); "
        "print('stuck', file=sys.stderr, flush=True); time.sleep(60)",
    ]
    started: list[subprocess.Popen[str]] = []
    real_popen = subprocess.Popen

    def popen(args: list[str], **options: object) -> subprocess.Popen[str]:
        started.append(real_popen(hanging, **options))  # type: ignore[call-overload]
        return started[-1]

    monkeypatch.setattr(userns, "HELPER_SECS", 0.2)
    monkeypatch.setattr(userns.subprocess, "Popen", popen)
    with pytest.raises(OSError, match="did not exit"):
        userns.Namespaces.make([])
    assert started and started[0].poll() is not None  # killed and reaped, not left behind


def test_namespaces_half_opened_are_closed_again() -> None:
    from ouroboros.sandbox.userns import namespace_fds

    before = set(os.listdir("/proc/self/fd"))
    with pytest.raises(OSError):
        namespace_fds(os.getpid(), (("user", "user"), ("net", "net"), ("no-such-kind", "x")))

    assert set(os.listdir("/proc/self/fd")) == before  # none keeps a namespace alive
    opened = namespace_fds(os.getpid(), (("net", "net"),))
    os.close(*opened)
