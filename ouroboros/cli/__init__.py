"""The `ouroboros` command. Each command parses its arguments, builds what it needs and calls
one function; errors become one line on stderr and an exit code (2 for usage or config).

    common.py       the app, the shared options, loading the project, errors to exit codes
    running.py      run, resume, init
    configuring.py  config show, config set, reload
    inspecting.py   status, runs, stats, logs, watch
    demo.py         demo

A command imports what it uses inside its body, so `--version`, `--help` and the read-only
commands start without the runner, httpx or rich.
"""

from ouroboros.cli.common import app

# Each module registers its commands on `app` as it is imported, so this order (not sorted) is
# the order `ouroboros --help` lists them in.
from ouroboros.cli import running, configuring, inspecting, demo

__all__ = ["app", "main", "running", "configuring", "inspecting", "demo"]


def main() -> None:
    """The `ouroboros` console script: `ouroboros run`, `ouroboros status`, ..."""
    app()
