"""The shell's sandbox: what `shell_exec` commands may read, write and reach, and saying so.

On Linux with Landlock the harness builds one ruleset per run; each command is started by a
fresh thread that confines itself first (see isolation.py: no launcher process, no fork of
the harness), and the command inherits that thread's confinement:

1. with `network = false`, a network namespace of its own holding only loopback, one per run
   (made by a thread of a root harness; otherwise in a user namespace made by a helper
   process and entered per command through `nsenter`, see userns.py);
2. a root harness's capabilities dropped (bounding set, permitted, effective), since a root
   process keeps reading other processes' `/proc/<pid>/environ` under Landlock;
3. no-new-privileges and the Landlock ruleset.

    sandbox = Sandbox.prepare("auto", workspace=ws, network=True, protected={...})
    sandbox.summary   # "landlock (ABI 7): shell reads the system, writes only ..."
    process = sandbox.spawn(["/bin/sh", "-c", cmd], env=sandbox.environment(env), ...)
    sandbox.close()   # removes the private temp dir

Inside, a command reads the system (`/usr`, `/bin`, `/lib*`, `/etc`, `/opt`, `/proc`, the
Python installation and the directories on PATH; in /etc only what any user may read) and
reads and writes only the workspace, a private temp dir (TMPDIR, and HOME, removed at the end
of the run) and `/dev/null` and its kin. Elsewhere (macOS, kernels without Landlock) `auto`
runs commands unconfined and says so; `required` refuses to start.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import weakref
from collections.abc import Generator, Iterable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ouroboros.errors import ConfigError
from ouroboros.sandbox import landlock, mounts, seccomp
from ouroboros.sandbox.cgroup import ToolCgroup
from ouroboros.sandbox.isolation import Confiner, last_capability, private_network
from ouroboros.sandbox.orphans import Orphans
from ouroboros.sandbox.reaper import temp_prefix, workspace_tag
from ouroboros.sandbox.userns import Entering, Namespaces

Setting = Literal["auto", "required", "off"]
Mechanism = Literal["landlock", "none", "off"]

SYSTEM_READ_ROOTS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/proc",
)
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


# -- pure decisions --------------------------------------------------------------------------


def read_roots(
    system: Iterable[str],
    path_env: str,
    prefixes: Iterable[str],
    protected: Iterable[Path],
    home: Path | None,
) -> list[Path]:
    """The directories a command may read and run programs from: the system's, then the
    Python installation and PATH's less any that is `/`, the home directory or one holding a
    protected path (a PATH entry of `~` or of the project directory would expose the state
    dir). A system directory is kept even so: `exposed` reports what it holds."""
    guarded = list(protected)
    roots = [Path(p) for p in system]
    extra = [Path(p) for p in prefixes]
    extra += [Path(p) for p in path_env.split(os.pathsep) if p.startswith("/")]
    for root in extra:
        if root in roots or root == Path("/") or (home is not None and root == home):
            continue
        if any(p.is_relative_to(root) for p in guarded):
            continue
        roots.append(root)
    return roots


def rules(
    abi: int, workspace: Path, private_tmp: Path | None, readable: Iterable[Path]
) -> list[tuple[Path, int]]:
    """What the ruleset grants: read on `readable`, everything on the workspace and the private
    temp dir, read-write on the harmless devices, listing of /dev."""
    granted = [(root, landlock.read_rights(abi)) for root in readable]
    granted.append((Path("/dev"), landlock.READ_DIR))
    granted += [(Path(device), landlock.device_rights(abi)) for device in DEVICES]
    granted.append((workspace, landlock.write_rights(abi)))
    if private_tmp is not None:
        granted.append((private_tmp, landlock.write_rights(abi)))
    return granted


def world_readable_rules(root: Path, read: int) -> list[tuple[Path, int]]:
    """Read rights under `root` on what any user may read: the whole tree where all of it is
    world-readable, else a listing of the directory and its readable parts one by one. A root
    harness confines its commands' reading of /etc this way (no /etc/shadow, no private keys),
    since a root process can read files made for root alone."""
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    parts: list[tuple[Path, int]] = []
    whole = True
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if entry.is_symlink():
            continue  # a link is followed to its target, which has its own rule or none
        if not info.st_mode & 0o004 or (entry.is_dir() and not info.st_mode & 0o001):
            whole = False
        elif entry.is_dir():
            inner = world_readable_rules(Path(entry.path), read)
            whole = whole and inner == [(Path(entry.path), read)]
            parts += inner
        else:
            parts.append((Path(entry.path), read & landlock.FILE_RIGHTS))
    if whole:
        return [(root, read)]
    return [(root, landlock.READ_DIR), *parts]


def exposed(workspace: Path, readable: Iterable[Path], protected: Mapping[str, Path]) -> list[str]:
    """The protected things a command can still reach: those inside the workspace (writable)
    or inside a readable directory."""
    found = []
    roots = list(readable)
    for what, path in protected.items():
        if path.is_relative_to(workspace):
            found.append(f"the {what} (inside the workspace)")
        elif holder := next((r for r in roots if path.is_relative_to(r)), None):
            found.append(f"the {what} (readable under {holder})")
    return found


def network_text(network: bool, cut: str) -> str:
    if network:
        return "network allowed"
    if cut == "namespace":
        return "network cut (own network namespace with only loopback)"
    if cut == "tcp":
        return "TCP cut by Landlock (UDP and other sockets are not)"
    return "network NOT cut (needs user namespaces or Landlock ABI 4)"


def sockets_text(sockets: str) -> str:
    if sockets == "namespace":
        return (
            "unix sockets outside the workspace hidden (own mount namespace: /run, /tmp, "
            "/srv, /var/lib, /dev/shm and home are private)"
        )
    if sockets == "seccomp":
        return "unix sockets refused (seccomp filter; socketpair allowed)"
    return "unix sockets NOT closed (no mount namespace or seccomp here)"


def summary(
    mechanism: Mechanism,
    abi: int,
    network: bool,
    cut: str,
    exposures: list[str],
    why_none: str = "",
    sockets: str = "",
    skipped: Iterable[Path] = (),
) -> str:
    """The one line said at start and recorded in `run_start`."""
    if mechanism == "off":
        return 'sandbox off (safety.sandbox = "off"): shell is unconfined'
    if mechanism == "none":
        return f"no sandbox ({why_none}): shell is unconfined"
    text = (
        f"landlock (ABI {abi}): shell reads the system, writes only the workspace and a "
        f"private temp dir; {network_text(network, cut)}; {sockets_text(sockets)}"
    )
    if abi < 3:
        text += "; below Landlock ABI 3 truncate() is not restricted on read-only roots"
    if skipped := list(skipped):
        text += "; skipped unreadable: " + ", ".join(map(str, skipped))
    if exposures:
        text += "; not protected: " + ", ".join(exposures)
    return text


def reachable(roots: Iterable[Path]) -> tuple[list[Path], list[Path]]:
    """The roots this process can open, and those it cannot (an entry on PATH under a
    directory it may not search): the latter are left out of the ruleset and named."""
    kept, skipped = [], []
    for root in roots:
        try:
            os.close(os.open(root, os.O_PATH | os.O_CLOEXEC))
        except FileNotFoundError:
            kept.append(root)  # the ruleset skips what is missing, quietly
        except OSError:
            skipped.append(root)
        else:
            kept.append(root)
    return kept, skipped


def kept_in_namespace(
    workspace: Path,
    private_tmp: Path,
    readable: Iterable[Path],
    etc_links: Iterable[str] = ("/etc/resolv.conf",),
) -> list[Path]:
    """What the mount namespace binds back inside the hidden directories: the workspace, the
    private temp dir, every readable root, and the targets of /etc's links into them (the
    resolver's /run/systemd/resolve/stub-resolv.conf)."""
    keep = [workspace, private_tmp, *readable]
    keep += [Path(os.path.realpath(link)) for link in etc_links if os.path.islink(link)]
    return keep


def missing_mechanism(abi: int, platform: str) -> str:
    """Why no sandbox is available here, in the words of the one-line error."""
    if not platform.startswith("linux"):
        return f"Landlock is Linux-only and this is {platform}"
    if abi == 0:
        return "this kernel offers no Landlock (Linux 5.13 or newer with landlock in the lsm= list)"
    return ""


# -- the sandbox of a run --------------------------------------------------------------------

Launcher = Confiner | Entering


@dataclass
class Sandbox:
    """How this run's shell commands are confined; `launcher` is None when they are not."""

    setting: Setting
    mechanism: Mechanism
    abi: int
    network: bool
    network_cut: str  # "namespace", "tcp" or "" (not cut)
    summary: str
    launcher: Launcher | None = None
    private_tmp: Path | None = None
    exposures: list[str] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)  # unreadable roots left out
    sockets: str = ""  # how unix sockets are closed: "namespace", "seccomp" or "" (not)
    cgroup: ToolCgroup | None = None  # where commands are born, once the run holds its lock
    orphans: Orphans | None = None  # else: the harness adopts its tools' orphans

    @property
    def confined(self) -> bool:
        return self.launcher is not None

    def describe(self) -> dict[str, object]:
        """For `run_start`: exactly what is confined and what is not."""
        return {
            "setting": self.setting,
            "mechanism": self.mechanism,
            "abi": self.abi,
            "network": self.network,
            "network_cut": self.network_cut or None,
            "unix_sockets": self.sockets or None,
            "skipped_roots": [str(p) for p in self.skipped],
            "exposed": self.exposures,
            "summary": self.summary,
        }

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """The command's environment: HOME and TMPDIR point into the private temp dir (the
        real home is not readable), unchanged when unconfined."""
        env = dict(base)
        if self.private_tmp is not None:
            env["HOME"] = str(self.private_tmp / "home")
            env["TMPDIR"] = str(self.private_tmp / "tmp")
        return env

    def spawn(self, args: list[str], **popen: Any) -> subprocess.Popen[bytes]:
        """Start a command, confined (subprocess.Popen's arguments). Raises OSError, and never
        starts the command unconfined when confinement fails."""
        self.settle()
        with self.cgroup.holding() if self.cgroup is not None else nullcontext():
            if self.launcher is None:
                process = subprocess.Popen(args, **popen)
            else:
                process = self.launcher.spawn(args, **popen)
        if self.orphans is not None:
            self.orphans.started(process)
        return process

    def settle(self) -> None:
        """After a command: reap the orphans that exited, name the running ones to the
        watchdog (where the harness adopts them: no cgroup)."""
        if self.orphans is not None:
            self.orphans.reap_exited()

    def close(self) -> None:
        """Remove the private temp dir and free the ruleset."""
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer()

    @classmethod
    def unconfined(cls, setting: Setting, why: str) -> Sandbox:
        mechanism: Mechanism = "off" if setting == "off" else "none"
        return cls(setting, mechanism, 0, True, "", summary(mechanism, 0, True, "", [], why))

    @classmethod
    def prepare(
        cls,
        setting: Setting,
        *,
        workspace: Path,
        network: bool = True,
        protected: Mapping[str, Path] | None = None,
    ) -> Sandbox:
        """The best sandbox this machine offers for `setting`. Raises ConfigError, one line
        naming what is missing, when `setting` is "required" and none can be had."""
        if setting == "off":
            return cls.unconfined(setting, "")
        abi = landlock.abi()
        missing = missing_mechanism(abi, sys.platform)
        if missing:
            return refuse_or_unconfined(setting, missing)
        return _prepare_landlock(setting, abi, workspace.resolve(), network, protected or {})


def refuse_or_unconfined(setting: Setting, missing: str) -> Sandbox:
    """No sandbox can be had: "required" refuses (one line naming what is missing), "auto"
    runs the shell unconfined and says why."""
    if setting == "required":
        raise ConfigError(
            f'safety.sandbox = "required", but {missing}; the run is refused '
            "rather than start the shell unconfined"
        )
    return Sandbox.unconfined(setting, missing)


def system_rules(
    abi: int, workspace: Path, private_tmp: Path, readable: list[Path], *, root: bool
) -> list[tuple[Path, int]]:
    """`rules`, with /etc narrowed to what any user may read when the harness is root."""
    if not root:
        return rules(abi, workspace, private_tmp, readable)
    etc = Path("/etc")
    return rules(
        abi, workspace, private_tmp, [r for r in readable if r != etc]
    ) + world_readable_rules(etc, landlock.read_rights(abi))


def _prepare_landlock(
    setting: Setting, abi: int, workspace: Path, network: bool, protected: Mapping[str, Path]
) -> Sandbox:
    home = Path(os.environ["HOME"]).resolve() if os.environ.get("HOME") else None
    guarded = {what: path.resolve() for what, path in protected.items()}
    readable, skipped = reachable(
        read_roots(
            SYSTEM_READ_ROOTS,
            os.environ.get("PATH", ""),
            {sys.prefix, sys.base_prefix},
            guarded.values(),
            home,
        )
    )
    private_tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(workspace_tag(workspace)))).resolve()
    for sub in ("home", "tmp"):
        (private_tmp / sub).mkdir()
    granted = system_rules(abi, workspace, private_tmp, readable, root=os.geteuid() == 0)
    hiding = mounts.plan(
        mounts.hidden_dirs(home), kept_in_namespace(workspace, private_tmp, readable)
    )
    found = _first_working(_launchers(abi, granted, network, hiding))
    if isinstance(found, str):
        shutil.rmtree(private_tmp, ignore_errors=True)
        return refuse_or_unconfined(setting, f"the sandbox could not be applied ({found})")
    cut, launcher = found
    if not network and not cut and setting == "required":
        _dispose(launcher, private_tmp)
        raise ConfigError(
            'safety.sandbox = "required" with safety.network = false, but the '
            "network cannot be cut here (no user namespaces, Landlock ABI below "
            "4); the run is refused rather than leave the network open"
        )
    exposures = exposed(workspace, readable, guarded)
    sandbox = Sandbox(
        setting,
        "landlock",
        abi,
        network,
        cut,
        summary("landlock", abi, network, cut, exposures, "", launcher.sockets, skipped),
        launcher,
        private_tmp,
        exposures,
        skipped,
        launcher.sockets,
    )
    sandbox._finalizer = weakref.finalize(  # type: ignore[attr-defined]
        sandbox, _dispose, launcher, private_tmp
    )
    return sandbox


def _launchers(
    abi: int, granted: list[tuple[Path, int]], network: bool, hiding: list[tuple[Path, list[Path]]]
) -> Generator[tuple[str, Launcher], None, None]:
    """Ways to start commands, best first, with how each cuts the network: a network
    namespace cuts every socket family (and Landlock then leaves TCP alone, so loopback
    works); Landlock's TCP rights (ABI 4) are the fallback; last, not cut at all. Unix
    sockets are hidden by a mount namespace where one is made (root: once per run; non-root
    with the network cut: in the user namespace made for the run, see userns.py), else
    refused by seccomp."""
    root = os.geteuid() == 0
    mountns = _private_mounts(hiding) if root else -1

    def confiner(*, tcp_allowed: bool, netns: int = -1, sockets: bool = True) -> Confiner:
        ruleset = landlock.Ruleset.build(abi, granted, network=tcp_allowed)
        hidden = os.dup(mountns) if sockets and mountns >= 0 else -1
        return Confiner(
            ruleset,
            netns,
            drop_capabilities=root,
            last_capability=last_capability(),
            mountns=hidden,
            refuse_unix=sockets and hidden < 0 and seccomp.supported(),
        )

    try:
        if network:
            yield "", confiner(tcp_allowed=True)
            return
        if root:
            try:
                yield "namespace", confiner(tcp_allowed=True, netns=private_network())
            except OSError:
                pass
        else:
            try:
                namespaces = Namespaces.make(hiding)
            except OSError:
                pass
            else:
                yield (
                    "namespace",
                    Entering(confiner(tcp_allowed=True, sockets=not hiding), namespaces),
                )
        if abi >= 4:
            yield "tcp", confiner(tcp_allowed=False)
        yield "", confiner(tcp_allowed=True)
    finally:
        if mountns >= 0:
            os.close(mountns)


def _private_mounts(hiding: list[tuple[Path, list[Path]]]) -> int:
    """The run's mount namespace hiding the unix sockets, or -1 where none can be made."""
    try:
        return mounts.private_mounts(hiding, ctypes.CDLL(None, use_errno=True))
    except OSError:
        return -1


def _first_working(
    launchers: Generator[tuple[str, Launcher], None, None],
) -> tuple[str, Launcher] | str:
    """The first launcher a command really starts through, or why none did."""
    failures = []
    try:
        for cut, launcher in launchers:
            failure = _works(launcher)
            if not failure:
                return cut, launcher
            launcher.close()
            failures.append(failure)
    except OSError as error:  # the kernel refused the ruleset itself
        failures.append(f"the Landlock ruleset could not be built: {error}")
    finally:
        launchers.close()
    return "; ".join(failures) or "no way to start a command"


def _works(launcher: Launcher) -> str:
    """'' when a command starts through `launcher`, else why not."""
    try:
        process = launcher.spawn(
            ["/bin/sh", "-c", ":"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        code = process.wait(timeout=10)
    except (OSError, subprocess.SubprocessError) as error:
        return str(error.__cause__ or error)
    return "" if code == 0 else f"a test command exited {code}"


def _dispose(launcher: Launcher, private_tmp: Path) -> None:
    launcher.close()
    shutil.rmtree(private_tmp, ignore_errors=True)
