"""Start-up CPU: what each `ouroboros` command costs a machine, per process (user + sys).

A project on the scripted server runs `--turns` turns (an 8k window, a file read a turn, a
restart every ~20 turns), then each command is started `--repeat` times on that state dir and
the least CPU of its processes is printed (the machine is shared: CPU, not wall time, and the
least, which the neighbours disturbed least). `resume` is timed to its first request to the
model, as a user waits for it; `run` is a whole one-turn run (start, one turn, end). The
`ouroboros` processes the test suite starts are mostly of these kinds. The processes read
compiled bytecode, as an installed package gives them (PYTHONDONTWRITEBYTECODE is dropped for
them, else each process compiles every module of ours).

Floors (issue 19): `status` at most 0.4 s of CPU on a state dir of any size, `resume` to its
first request at most 1 s. Three more rows say what `status` pays before it reads the run: the
interpreter, the libraries it is built on, and the config read and validated.

    python benchmarks/startup_cpu.py [--turns 1000] [--repeat 5]
    python benchmarks/startup_cpu.py --config DIR/ouroboros.toml   # an existing project
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WINDOW = 8192
FLOORS = {"status": 0.4, "resume (to its first request)": 1.0}


def brain(messages: list[dict[str, Any]]) -> Any:
    from ouroboros.testing import Reply

    done = sum(1 for m in messages if m["role"] == "tool")
    return Reply("Reading on.", [("file_read", {"path": f"data/{done % 20:02d}.txt"})])


def make_project(root: Path, base_url: str) -> Path:
    import tomli_w

    (root / "workspace" / "data").mkdir(parents=True)
    for i in range(20):
        (root / "workspace" / "data" / f"{i:02d}.txt").write_text(f"file {i}\n" * 100)
    (root / "SYSTEM_PROMPT.md").write_text("Read the files in data/, one a turn, forever.\n")
    config = {
        "model": {"base_url": base_url, "name": "scripted", "context_limit": WINDOW},
        "context": {"keep_recent_observations": 1000, "carryover_turns": 2},
        "safety": {"sandbox": "off"},
    }
    (root / "ouroboros.toml").write_text(tomli_w.dumps(config))
    return root / "ouroboros.toml"


ENV = dict(os.environ)


def keep_bytecode() -> None:
    """Let the processes started with ENV read and write compiled bytecode, as an installed
    package's do (with PYTHONDONTWRITEBYTECODE set, each would compile every module of ours)."""
    ENV.pop("PYTHONDONTWRITEBYTECODE", None)


def cpu_of(args: list[str], server: Any | None = None) -> float:
    """CPU seconds of one `ouroboros ARGS` process (and its children); with `server`, it is
    killed at its first chat request."""
    return cpu_and_rss(args, server, ENV)[0]


def cpu_and_rss(
    args: list[str], server: Any | None = None, env: dict[str, str] | None = None
) -> tuple[float, float]:
    """CPU seconds and peak RSS (MB) of one `ouroboros ARGS` process (and its children); with
    `server`, it is killed at its first chat request (resume: its cost to its first request)."""
    before = len(server.requests) if server is not None else 0
    process = subprocess.Popen(
        [sys.executable, "-m", "ouroboros", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    if server is not None:
        deadline = time.monotonic() + 120
        while (
            len(server.requests) == before
            and time.monotonic() < deadline
            and process.poll() is None
        ):
            time.sleep(0.005)
        process.kill()
    _, _, usage = os.wait4(process.pid, 0)
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


LIBRARIES = "import typer, typer._adapters, rich.console, rich.table"


def before_the_run(config: Path) -> dict[str, str]:
    """What `status` pays before it reads a byte of the run, as Python programs: the
    interpreter, the libraries (typer 0.29 coerces parameters with pydantic, so imports it),
    and then the config read and validated as `status` reads it."""
    return {
        "python alone": "pass",
        "python + typer, pydantic, rich": LIBRARIES,
        "... + ouroboros.toml read": f"{LIBRARIES}\nfrom pathlib import Path\n"
        "from ouroboros.cli.common import load_for_reading\n"
        f"load_for_reading(Path({str(config)!r}), 'status')",
    }


def python_cpu(code: str) -> float:
    """CPU seconds of one `python -c CODE` process."""
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=ENV,
    )
    _, _, usage = os.wait4(process.pid, 0)
    return usage.ru_utime + usage.ru_stime


def commands(config: Path) -> dict[str, list[str]]:
    c = ["--config", str(config)]
    return {
        "--version": ["--version"],
        "--help": ["--help"],
        "status": ["status", *c],
        "status --json": ["status", "--json", *c],
        "runs": ["runs", *c],
        "stats": ["stats", *c],
        "logs -n 20": ["logs", "-n", "20", *c],
        "config show": ["config", "show", *c],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000, help="turns the run takes first")
    parser.add_argument("--repeat", type=int, default=5, help="processes per command")
    parser.add_argument("--config", type=Path, help="time an existing project instead")
    args = parser.parse_args()
    from ouroboros.testing import ScriptedServer

    with (
        tempfile.TemporaryDirectory() as tmp,
        ScriptedServer(brain, context_length=WINDOW) as server,
    ):
        keep_bytecode()
        config = args.config or make_project(Path(tmp), server.base_url)
        if args.config is None:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "ouroboros",
                    "run",
                    "--config",
                    str(config),
                    "--headless",
                    "--max-turns",
                    str(args.turns),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=ENV,
            )
            server.requests.clear()
        print(f"| command | least CPU s of {args.repeat} | floor |")
        print("|---|---:|---:|")
        for name, command in commands(config).items():
            row(name, min(cpu_of(command) for _ in range(args.repeat)))
        for name, code in before_the_run(config).items():
            row(name, min(python_cpu(code) for _ in range(args.repeat)))
        if args.config is None:
            resume = ["resume", "--config", str(config), "--headless", "--max-turns", "0"]
            row(
                "resume (to its first request)",
                min(cpu_of(resume, server) for _ in range(args.repeat)),
            )
            one = Path(tmp) / "one"
            one_config = make_project(one, server.base_url)
            run = ["run", "--config", str(one_config), "--headless", "--max-turns", "1"]
            row("run (one turn, whole)", min(cpu_of(run) for _ in range(args.repeat)))


def row(name: str, cpu: float) -> None:
    floor = FLOORS.get(name)
    verdict = "" if floor is None else f"{floor:.1f} ({'holds' if cpu <= floor else 'over'})"
    print(f"| `{name}` | {cpu:.2f} | {verdict} |", flush=True)


if __name__ == "__main__":
    main()
