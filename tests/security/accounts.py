"""Running a piece of the attack as another, unprivileged user: created with `useradd` where
the tests run as root and the machine has it, else the test is skipped with the reason."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

PROBE_USER = "ouroboros-probe"


def probe_user() -> tuple[int, int]:
    """The probe user's uid and gid, the user made if missing; skips the test where it
    cannot be (not root, no useradd/setpriv)."""
    if os.geteuid() != 0:
        pytest.skip("making an unprivileged user needs root")
    if not (shutil.which("useradd") and shutil.which("setpriv")):
        pytest.skip("no useradd or setpriv on this machine")
    found = subprocess.run(["id", "-u", PROBE_USER], capture_output=True, text=True)
    if found.returncode != 0:
        made = subprocess.run(
            ["useradd", "--system", "--no-create-home", PROBE_USER], capture_output=True, text=True
        )
        if made.returncode != 0:
            pytest.skip(f"useradd failed: {made.stderr.strip()}")
    uid = int(subprocess.run(["id", "-u", PROBE_USER], capture_output=True, text=True).stdout)
    gid = int(subprocess.run(["id", "-g", PROBE_USER], capture_output=True, text=True).stdout)
    return uid, gid


def shared_dir() -> Path:
    """A directory both root and the probe user can use (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="ouroboros-shared-"))
    path.chmod(0o777)
    return path


def probe_workspace(probe: str) -> tuple[Path, Path]:
    """A workspace `ws` owned by the probe user in a fresh shared dir, with `probe.py` (run by
    a confined command with /usr/bin/python3) in it: the shared dir and the workspace. Skips
    the test where there is no probe user or no /usr/bin/python3."""
    uid, gid = probe_user()
    if not os.path.exists("/usr/bin/python3"):
        pytest.skip("no /usr/bin/python3 for the probe")
    shared = shared_dir()
    workspace = shared / "ws"
    workspace.mkdir()
    (workspace / "probe.py").write_text(probe)
    os.chown(workspace, uid, gid)
    return shared, workspace


def as_probe_user(
    code: str,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    python: str = sys.executable,
    **popen,
) -> subprocess.Popen[str]:
    """Start `python -c code args...` as the probe user, with this checkout importable (give
    `python` one the probe user may start again itself, such as /usr/bin/python3, if the
    code starts Python)."""
    uid, gid = probe_user()
    root = str(Path(__file__).resolve().parents[2])
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": root,
        "HOME": "/nonexistent",
        **(env or {}),
    }
    return subprocess.Popen(
        [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={gid}",
            "--clear-groups",
            python,
            "-c",
            code,
            *args,
        ],
        env=environment,
        text=True,
        **popen,
    )


def harness_as_probe_user(
    project: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    """`ouroboros ARGS` run by the probe user, on a project the probe user owns; the system
    Python with this checkout and the venv's packages on the path (the venv's own
    interpreter may live where that user cannot reach)."""
    uid, gid = probe_user()
    subprocess.run(["chown", "-R", f"{uid}:{gid}", str(project)], check=True)
    root = Path(__file__).resolve().parents[2]
    packages = next(Path(sys.prefix).glob("lib/python3*/site-packages"))
    python = "/usr/bin/python3"
    if not os.path.exists(python):
        pytest.skip("no /usr/bin/python3 to run the harness as another user")
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/nonexistent",
        "PYTHONPATH": f"{root}:{packages}",
        "XDG_CACHE_HOME": str(project / "cache"),
        "XDG_CONFIG_HOME": "/nonexistent-ouroboros-test",
        **(env or {}),
    }
    return subprocess.run(
        [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={gid}",
            "--clear-groups",
            python,
            "-m",
            "ouroboros",
            *args,
        ],
        env=environment,
        cwd=str(project),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
