"""What the default test suite costs: CPU seconds (user + sys) of the whole process tree, and
wall seconds, for `python -m pytest` as the README gives it.

    python benchmarks/suite_cpu.py            # the default suite, as CI runs it
    python benchmarks/suite_cpu.py -- -n 2    # pytest arguments after --

The CPU figure is what the suite asks of a machine, however busy: every pytest worker, every
`ouroboros` process a test starts and every shell command they run are waited for, so their
time is in RUSAGE_CHILDREN when pytest exits. The floor (issue 24): at most 150 CPU-seconds.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

FLOOR_CPU_SECS = 150.0


def main(argv: list[str]) -> int:
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    root = Path(__file__).resolve().parent.parent
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra],
        cwd=root,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime
    summary = (result.stdout.strip().splitlines() or ["(no output)"])[-1]
    print(f"pytest: {summary}")
    print(
        f"CPU {cpu:.0f} s (user {usage.ru_utime:.0f} s + sys {usage.ru_stime:.0f} s), "
        f"wall {wall:.0f} s, peak RSS of one process {usage.ru_maxrss / 1024:.0f} MB"
    )
    verdict = "holds" if cpu <= FLOOR_CPU_SECS else "does not hold"
    print(f"floor: at most {FLOOR_CPU_SECS:.0f} CPU-seconds: {verdict}")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
