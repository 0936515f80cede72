"""Building projects and running the real `ouroboros` command in tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Container, Sequence

import pytest
import tomli_w

from ouroboros.store.log import list_runs, run_records


def sweep(cases: Sequence[Any], sample: Container[Any], ids: Sequence[str]) -> list[Any]:
    """Every case of an exhaustive sweep as a pytest parameter: the `sample` runs in the
    default suite, the rest only with `-m sweep` (CI runs both), so the suite stays cheap and
    every case is still run before a change lands."""
    return [
        pytest.param(
            *(case if isinstance(case, tuple) else (case,)),
            id=name,
            marks=() if case in sample else pytest.mark.sweep,
        )
        for case, name in zip(cases, ids)
    ]


def make_project(
    root: Path, base_url: str, *, prompt: str = "You are a test agent.", **tables: dict[str, Any]
) -> Path:
    """A project directory: ouroboros.toml, SYSTEM_PROMPT.md and an empty workspace."""
    config: dict[str, Any] = {
        "model": {
            "base_url": base_url,
            "name": "scripted",
            "max_retry_secs": 2,
            "wait_for_server_secs": 0,
        },  # a test about waiting says how long
    }
    for table, values in tables.items():
        config[table] = {**config.get(table, {}), **values}
    root.mkdir(parents=True, exist_ok=True)
    (root / "ouroboros.toml").write_text(tomli_w.dumps(config))
    (root / "SYSTEM_PROMPT.md").write_text(prompt)
    (root / "workspace").mkdir(exist_ok=True)
    return root / "ouroboros.toml"


def clean_env(**extra: str) -> dict[str, str]:
    """The environment a user's shell would give, minus anything that would steer the test."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("OUROBOROS_") and k != "OLLAMA_HOST"
    }
    env["XDG_CONFIG_HOME"] = "/nonexistent-ouroboros-test"
    env.update(extra)
    return env


def ouroboros(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 50
) -> subprocess.CompletedProcess[str]:
    """Run the installed command as a user would, in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "ouroboros", *args],
        cwd=cwd,
        env=env or clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def ouroboros_here(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`ouroboros ARGS` run in this process, as `ouroboros` runs it (the same app, the same
    environment as `ouroboros()` gives it): its exit code, stdout and stderr. For a test about
    what a command says or does, not about its process: the real process's exit codes are
    tested in test_cli_startup.py, its signals, `kill -9` and sandbox in their own tests.

    `run` and `resume` too: what a run changes in its process is put back after it (the
    environment, which it scrubs of the API key; the stop signals' handlers, SIGHUP's; the
    working directory). Without a tool cgroup the run adopts its tools' orphans, and kills at
    its end every child of this process in another session that it did not start: there must
    be none (checked). `env`, as for `ouroboros()`: the whole environment (clean_env(...))."""
    from typer.testing import CliRunner

    from ouroboros.cli import app

    no_foreign_children()
    given = clean_env() if env is None else env
    changes: dict[str, str | None] = {name: None for name in os.environ if name not in given}
    changes.update(given)
    here, environ = Path.cwd(), dict(os.environ)
    handlers = {sig: signal.getsignal(sig) for sig in RUN_SIGNALS}
    os.chdir(cwd or here)
    try:
        result = CliRunner(env=changes).invoke(app, list(args), catch_exceptions=False)
    finally:
        os.chdir(here)
        os.environ.clear()
        os.environ.update(environ)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return subprocess.CompletedProcess(
        ["ouroboros", *args], result.exit_code, result.stdout, result.stderr
    )


class Forked:
    """A child forked from this process: what a test needs of subprocess.Popen (pid, poll,
    wait, send_signal, kill, returncode: -N when a signal ended it)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(["ouroboros"], timeout or 0)
            time.sleep(0.005)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # never a pid that has been reaped (and maybe reused)
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def ouroboros_forked(
    *args: str,
    out: Path,
    err: Path,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    prepare: Callable[[], None] | None = None,
) -> Forked:
    """`ouroboros ARGS` in the background in a real process of its own, forked from this one:
    the `ouroboros` command's own entry point (ouroboros.cli.main) with its exit code, its
    signals and `kill -9` those of a process, but without an interpreter to start and the
    package to import again (0.6 s of CPU each). Its stdout and stderr are appended to `out`
    and `err`; stdin is /dev/null. `prepare` runs in the child first (to wrap a function of
    the harness there, say), and changes nothing in this process."""
    from ouroboros.cli import app, main  # imported here, once, not in each child

    assert app is not None
    no_foreign_children()
    environment = clean_env() if env is None else env
    streams = [os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND) for path in (out, err)]
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(main, list(args), streams, cwd or Path.cwd(), environment, prepare)  # no return
    for fd in streams:
        os.close(fd)
    return Forked(pid)


def _child(
    main: Any,
    args: list[str],
    streams: list[int],
    cwd: Path,
    environment: dict[str, str],
    prepare: Callable[[], None] | None,
) -> None:
    """The forked child: `ouroboros ARGS` as its process would run it, then _exit with its
    code; never back into pytest, whatever happens."""
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(streams[0], 1)
        os.dup2(streams[1], 2)
        for fd in map(int, os.listdir("/proc/self/fd")):
            if fd > 2 and fd != null:  # none of this process's sockets, pipes and files: a
                try:  # server the test stops must refuse, not wait on us
                    os.dup2(null, fd)  # (in place, not closed: no number is given again)
                except OSError:
                    pass
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as Python starts a process
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGALRM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(environment)
        sys.argv = ["ouroboros", *args]
        if prepare is not None:
            prepare()
        main()
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 0 if exit.code is None else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def ouroboros_child(
    *args: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 50,
    prepare: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """As `ouroboros()`, in a process forked from this one (ouroboros_forked): for a test about
    what a run does in a process of its own (its environment, what its tools inherit), not
    about how the interpreter starts."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ouroboros-child-") as streams:
        out, err = Path(streams) / "out", Path(streams) / "err"
        process = ouroboros_forked(*args, out=out, err=err, cwd=cwd, env=env, prepare=prepare)
        try:
            process.wait(timeout)
        finally:
            process.kill()
            process.wait()
        return subprocess.CompletedProcess(
            ["ouroboros", *args], process.returncode, out.read_text(), err.read_text()
        )


RUN_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE)


def running(pid: int) -> bool:
    """Whether process `pid` runs: alive and not a zombie (an orphan's zombie may linger
    if nothing reaps it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def no_foreign_children() -> None:
    """Fail if this process has a running child in another session (see ouroboros_here)."""
    from ouroboros.sandbox.orphans import own_children

    session = os.getsid(0)
    for pid in own_children():
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[-1].split()
        except OSError:
            continue
        if stat[0] not in (b"Z", b"X") and int(stat[3]) != session:
            raise AssertionError(f"child {pid} in another session: a run here would kill it")


def run_dir(project: Path) -> Path:
    """The directory of the project's latest run."""
    return project / ".ouroboros" / "runs" / list_runs(project / ".ouroboros")[-1]


def parts_recorded(project: Path) -> Counter[str]:
    """How often each part is in the demo task's results.txt (tests/crash_helpers.py)."""
    path = project / "workspace" / "results.txt"
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(line.split(":")[0] for line in lines)


def run_events(project: Path, run_id: str | None = None) -> list[dict[str, Any]]:
    state_dir = project / ".ouroboros"
    run_id = run_id or list_runs(state_dir)[-1]
    return list(run_records(state_dir / "runs" / run_id))  # across the log's segments


def of_type(events: list[dict[str, Any]], type: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == type]


def whole_panels(lines: list[str]) -> list[str]:
    """The titles of the dashboard panels drawn from top border to bottom border, in order:
    a panel cut off by the terminal is missing."""
    titles, open_title = [], None
    for line in lines:
        if line.startswith("╭─ "):
            open_title = line[3:].split(" ")[0]
        elif line.startswith("╰") and open_title is not None:
            titles.append(open_title)
            open_title = None
    return titles


HOLDING = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(60)
"""


def hold_state_lock(state_dir: Path, holder: dict[str, Any]) -> int:
    """The state dir's lock naming `holder` and held with flock by this process, as a running
    harness holds it: the fd to close to let it go."""
    import fcntl
    import json

    path = state_dir / "lock"
    path.write_text(json.dumps(holder))
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def harness_holding(state_dir: Path, run_id: str) -> subprocess.Popen[str]:
    """A process holding the state dir's lock, which names it, until killed (or signalled):
    a harness as `status`, `tell` and `reload` find it."""
    import json
    import socket

    path = state_dir / "lock"
    path.write_text("")
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDING, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline() == "held\n"
    path.write_text(
        json.dumps({"pid": process.pid, "host": socket.gethostname(), "run_id": run_id})
    )
    return process
